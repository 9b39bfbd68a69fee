"""The legacy completions endpoint: text and token prompts, batches, echo, streaming, logprobs."""

EXACT = {"ignore_eos": True}
PROMPT = "The quick brown fox"


def test_completion_text_and_usage(client, model):
    r = client.completions.create(model=model, prompt=PROMPT, max_tokens=9, temperature=0, extra_body=EXACT)
    assert r.object == "text_completion"
    assert r.choices[0].finish_reason == "length"
    assert isinstance(r.choices[0].text, str)
    assert r.usage.completion_tokens == 9
    assert r.usage.total_tokens == r.usage.prompt_tokens + 9


def test_default_max_tokens_is_16(client, model):
    r = client.completions.create(model=model, prompt=PROMPT, temperature=0, extra_body=EXACT)
    assert r.usage.completion_tokens == 16


def test_token_id_prompt(client, model):
    ids = list(range(40, 60))
    r = client.completions.create(model=model, prompt=ids, max_tokens=8, temperature=0, extra_body=EXACT)
    assert r.usage.prompt_tokens == len(ids)
    assert r.usage.completion_tokens == 8
    again = client.completions.create(model=model, prompt=[ids], max_tokens=8, temperature=0, extra_body=EXACT)
    assert again.choices[0].text == r.choices[0].text


def test_batched_prompts_each_match_their_solo_run(client, model):
    prompts = ["one", "two two", "three three three"]
    batch = client.completions.create(model=model, prompt=prompts, max_tokens=6, temperature=0, extra_body=EXACT)
    assert [c.index for c in batch.choices] == [0, 1, 2]
    for p, c in zip(prompts, batch.choices):
        solo = client.completions.create(model=model, prompt=p, max_tokens=6, temperature=0, extra_body=EXACT)
        assert c.text == solo.choices[0].text


def test_echo_prepends_the_prompt(client, model):
    plain = client.completions.create(model=model, prompt=PROMPT, max_tokens=5, temperature=0, extra_body=EXACT)
    echoed = client.completions.create(
        model=model, prompt=PROMPT, max_tokens=5, temperature=0, echo=True, extra_body=EXACT
    )
    assert echoed.choices[0].text == PROMPT + plain.choices[0].text


def test_streaming_completion_matches_whole(client, model):
    whole = client.completions.create(model=model, prompt=PROMPT, max_tokens=12, temperature=0, extra_body=EXACT)
    chunks = list(
        client.completions.create(
            model=model, prompt=PROMPT, max_tokens=12, temperature=0, stream=True,
            stream_options={"include_usage": True}, extra_body=EXACT,
        )
    )
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text == whole.choices[0].text
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["length"]
    assert chunks[-1].usage.completion_tokens == 12


def test_completion_logprobs_are_parallel_arrays(client, model):
    r = client.completions.create(
        model=model, prompt=PROMPT, max_tokens=7, temperature=0, logprobs=2, extra_body=EXACT
    )
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == 7
    assert all(x <= 0 for x in lp.token_logprobs)
    assert all(1 <= len(t) <= 2 for t in lp.top_logprobs)
    assert lp.text_offset == sorted(lp.text_offset)


def test_seeded_completions_reproduce(client, model):
    def run(seed):
        return client.completions.create(
            model=model, prompt=PROMPT, max_tokens=16, temperature=0.9, top_p=0.95, seed=seed,
            extra_body={"top_k": 50, "ignore_eos": True},
        ).choices[0].text

    assert run(1) == run(1)
    assert run(1) != run(2)

