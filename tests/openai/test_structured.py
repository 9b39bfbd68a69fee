"""Structured output through the official client: `chat.completions.parse` with a Pydantic model,
`response_format` json_object, and vLLM's guided fields passed as `extra_body`."""

import json
from typing import List, Literal

from pydantic import BaseModel, Field

MESSAGES = [{"role": "user", "content": "Describe a release as JSON."}]


class Release(BaseModel):
    name: str = Field(max_length=16)
    major: int = Field(ge=0, le=99)
    channel: Literal["stable", "beta", "nightly"]
    platforms: List[Literal["linux", "macos", "windows"]] = Field(max_length=3)


def test_parse_with_a_pydantic_model(client, model):
    for seed in range(5):
        r = client.chat.completions.parse(
            model=model,
            messages=MESSAGES,
            response_format=Release,
            max_tokens=400,
            temperature=1.0,
            seed=seed,
        )
        choice = r.choices[0]
        assert choice.finish_reason == "stop", choice
        parsed = choice.message.parsed
        assert isinstance(parsed, Release)
        assert parsed == Release.model_validate_json(choice.message.content)


def test_json_object_and_guided_choice(client, model):
    r = client.chat.completions.create(
        model=model,
        messages=MESSAGES,
        response_format={"type": "json_object"},
        max_tokens=400,
        temperature=0.8,
        seed=11,
    )
    if r.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(r.choices[0].message.content), dict)
    r = client.chat.completions.create(
        model=model,
        messages=MESSAGES,
        max_tokens=20,
        temperature=1.0,
        n=4,
        extra_body={"guided_choice": ["alpha", "beta"]},
    )
    assert {c.message.content for c in r.choices} <= {"alpha", "beta"}


class GetWeather(BaseModel):
    city: str = Field(max_length=12)
    unit: Literal["c", "f"]


def test_forced_tool_call_parses_into_the_pydantic_model(client, model):
    import openai

    tool = openai.pydantic_function_tool(GetWeather)
    r = client.chat.completions.parse(
        model=model,
        messages=[{"role": "user", "content": "Weather in Oslo?"}],
        tools=[tool],
        tool_choice={"type": "function", "function": {"name": "GetWeather"}},
        max_tokens=300,
        temperature=1.0,
        seed=4,
    )
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls
    assert call.function.name == "GetWeather"
    assert isinstance(call.function.parsed_arguments, GetWeather)
    # Streamed, the same call arrives in tool_calls deltas.
    stream = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "Weather in Oslo?"}],
        tools=[tool],
        tool_choice={"type": "function", "function": {"name": "GetWeather"}},
        max_tokens=300,
        temperature=1.0,
        seed=4,
        stream=True,
    )
    args, finish = "", None
    for chunk in stream:
        for c in chunk.choices:
            for d in c.delta.tool_calls or []:
                args += d.function.arguments or ""
            finish = c.finish_reason or finish
    assert finish == "tool_calls"
    assert json.loads(args) == json.loads(call.function.arguments)
