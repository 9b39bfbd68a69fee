"""64 simultaneous streaming clients: every one gets the right number of tokens, and each greedy
answer equals the same request run alone."""

import asyncio

import openai

CLIENTS = 64


def request(i):
    # Different prompts and lengths, so prefills and finishes interleave.
    return dict(
        messages=[{"role": "user", "content": f"Request {i}: " + "tell me more. " * (i % 5)}],
        max_tokens=8 + i % 9,
        temperature=0,
        extra_body={"ignore_eos": True},
    )


async def stream_one(client, model, i):
    text, usage = [], None
    stream = await client.chat.completions.create(
        model=model, stream=True, stream_options={"include_usage": True}, **request(i)
    )
    async for chunk in stream:
        if chunk.choices:
            text.append(chunk.choices[0].delta.content or "")
        if chunk.usage:
            usage = chunk.usage
    return "".join(text), usage


async def run_all(base_url, model):
    client = openai.AsyncOpenAI(base_url=f"{base_url}/v1", api_key="unused", max_retries=0, timeout=300)
    try:
        return await asyncio.gather(*(stream_one(client, model, i) for i in range(CLIENTS)))
    finally:
        await client.close()


def test_64_streaming_clients_match_their_solo_runs(base_url, client, model):
    together = asyncio.run(run_all(base_url, model))
    for i, (text, usage) in enumerate(together):
        want = request(i)["max_tokens"]
        assert usage is not None, f"client {i} got no usage chunk"
        assert usage.completion_tokens == want, f"client {i}"
        solo = client.chat.completions.create(model=model, **request(i))
        assert solo.usage.completion_tokens == want
        assert text == solo.choices[0].message.content, f"client {i} differs from its solo run"
