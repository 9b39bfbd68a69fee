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
