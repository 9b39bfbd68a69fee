"""Chat completions through the official client: whole, streamed, seeded, with logprobs."""

MESSAGES = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Name three colours."},
]
# Random dummy weights may pick an end-of-turn token at any step; ignore it for exact counts.
EXACT = {"ignore_eos": True}


def test_chat_reports_text_usage_and_length(client, model):
    r = client.chat.completions.create(
        model=model, messages=MESSAGES, max_tokens=12, temperature=0, extra_body=EXACT
    )
    assert r.object == "chat.completion"
    assert r.model == model
    assert len(r.choices) == 1
    choice = r.choices[0]
    assert choice.message.role == "assistant"
    assert isinstance(choice.message.content, str)
    assert choice.finish_reason == "length"
    assert r.usage.completion_tokens == 12
    assert r.usage.prompt_tokens > 0
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_greedy_is_deterministic(client, model):
    outs = {
        client.chat.completions.create(
            model=model, messages=MESSAGES, max_tokens=10, temperature=0, extra_body=EXACT
        ).choices[0].message.content
        for _ in range(2)
    }
    assert len(outs) == 1


def test_streaming_chat_matches_whole_answer(client, model):
    whole = client.chat.completions.create(
        model=model, messages=MESSAGES, max_tokens=10, temperature=0, extra_body=EXACT
    )
    stream = client.chat.completions.create(
        model=model,
        messages=MESSAGES,
        max_tokens=10,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
        extra_body=EXACT,
    )
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert text == whole.choices[0].message.content
    assert finishes == ["length"]
    # include_usage: a last chunk with no choices carries the usage; earlier ones carry none.
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 10
    assert chunks[-1].usage.prompt_tokens == whole.usage.prompt_tokens
    assert all(c.usage is None for c in chunks[:-1])
    assert len({c.id for c in chunks}) == 1 and chunks[0].object == "chat.completion.chunk"


def test_seeded_sampling_is_reproducible(client, model):
    def run(seed):
        return client.chat.completions.create(
            model=model, messages=MESSAGES, max_tokens=16, temperature=1.0, seed=seed, extra_body=EXACT
        ).choices[0].message.content

    assert run(42) == run(42)
    assert run(42) != run(43)


def test_n_choices_are_seeded_apart(client, model):
    r = client.chat.completions.create(
        model=model, messages=MESSAGES, max_tokens=8, temperature=1.0, seed=7, n=3, extra_body=EXACT
    )
    assert [c.index for c in r.choices] == [0, 1, 2]
    assert len({c.message.content for c in r.choices}) > 1
    assert r.usage.completion_tokens == 24
    again = client.chat.completions.create(
        model=model, messages=MESSAGES, max_tokens=8, temperature=1.0, seed=7, n=3, extra_body=EXACT
    )
    assert [c.message.content for c in again.choices] == [c.message.content for c in r.choices]


def test_chat_logprobs_have_openai_shape(client, model):
    r = client.chat.completions.create(
        model=model,
        messages=MESSAGES,
        max_tokens=6,
        temperature=0,
        logprobs=True,
        top_logprobs=3,
        extra_body=EXACT,
    )
    content = r.choices[0].logprobs.content
    assert len(content) == 6
    for entry in content:
        assert entry.logprob <= 0
        assert len(entry.top_logprobs) == 3
        tops = [t.logprob for t in entry.top_logprobs]
        assert tops == sorted(tops, reverse=True)
        # Greedy: the chosen token is the most likely one.
        assert entry.token == entry.top_logprobs[0].token
        assert abs(entry.logprob - tops[0]) < 1e-5
        assert isinstance(entry.bytes, list)


def test_streamed_logprobs_match_whole(client, model):
    kwargs = dict(model=model, messages=MESSAGES, max_tokens=5, temperature=0, logprobs=True,
                  top_logprobs=2, extra_body=EXACT)
    whole = client.chat.completions.create(**kwargs).choices[0].logprobs.content
    streamed = [
        e
        for c in client.chat.completions.create(stream=True, **kwargs)
        if c.choices and c.choices[0].logprobs
        for e in c.choices[0].logprobs.content
    ]
    assert [(e.token, round(e.logprob, 5)) for e in streamed] == [
        (e.token, round(e.logprob, 5)) for e in whole
    ]


def test_stop_string_cuts_the_text(client, model):
    base = client.chat.completions.create(
        model=model, messages=MESSAGES, max_tokens=24, temperature=0, extra_body=EXACT
    ).choices[0].message.content
    # A stop string taken from the middle of the greedy answer.
    candidates = [base[i:i + 2] for i in range(3, len(base) - 2) if "\ufffd" not in base[i:i + 2]]
    assert candidates, f"greedy output too short or unprintable: {base!r}"
    stop = candidates[len(candidates) // 2]
    r = client.chat.completions.create(
        model=model, messages=MESSAGES, max_tokens=24, temperature=0, stop=[stop], extra_body=EXACT
    )
    assert r.choices[0].finish_reason == "stop"
    assert r.choices[0].message.content == base[: base.index(stop)]
    streamed = "".join(
        c.choices[0].delta.content or ""
        for c in client.chat.completions.create(
            model=model, messages=MESSAGES, max_tokens=24, temperature=0, stop=stop, stream=True,
            extra_body=EXACT,
        )
        if c.choices
    )
    assert streamed == r.choices[0].message.content
