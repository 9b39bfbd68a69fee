"""Every kind of bad input gets an OpenAI-style JSON error with a 4xx status, and the server
keeps serving afterwards."""

import json
import urllib.request

import openai
import pytest

from conftest import raw_post

MSG = [{"role": "user", "content": "hi"}]


def assert_error_shape(body, status, code):
    assert status == code, body
    err = body["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert isinstance(err["message"], str) and err["message"]


def test_malformed_json(base_url):
    status, body = raw_post(base_url, "/v1/chat/completions", b'{"messages": [')
    assert_error_shape(body, status, 400)
    assert "JSON" in body["error"]["message"]


def test_wrong_type_names_the_field(base_url):
    status, body = raw_post(
        base_url, "/v1/chat/completions", json.dumps({"messages": MSG, "temperature": "hot"}).encode()
    )
    assert_error_shape(body, status, 400)
    assert body["error"]["param"] == "temperature"


def test_missing_messages(base_url):
    status, body = raw_post(base_url, "/v1/chat/completions", b'{"model": "x"}')
    assert_error_shape(body, status, 400)


def test_unknown_model_is_404(client):
    with pytest.raises(openai.NotFoundError) as e:
        client.chat.completions.create(model="gpt-17", messages=MSG)
    assert e.value.body["code"] == "model_not_found"


def test_empty_messages(client, model):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=model, messages=[])
    assert e.value.body["param"] == "messages"


def test_prompt_longer_than_context(client, model, max_context):
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=model, prompt=[65] * (max_context + 5), max_tokens=1)
    assert e.value.body["code"] == "context_length_exceeded"
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "a" * (max_context + 5)}]
        )
    assert e.value.body["code"] == "context_length_exceeded"


def test_max_tokens_past_context(client, model, max_context):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=model, messages=MSG, max_tokens=max_context)
    assert e.value.body["code"] == "context_length_exceeded"
    assert e.value.body["param"] == "max_tokens"


@pytest.mark.parametrize(
    "field,value",
    [
        ("temperature", 50),
        ("top_p", 2.0),
        ("n", 100000),
        ("max_tokens", -1),
        ("max_tokens", 0),
        ("top_logprobs", 999),
        ("presence_penalty", 1e9),
        ("top_k", -7),
        ("seed", 10**30),
    ],
)
def test_absurd_values(base_url, model, field, value):
    body = {"model": model, "messages": MSG, field: value}
    if field == "top_logprobs":
        body["logprobs"] = True
    status, resp = raw_post(base_url, "/v1/chat/completions", json.dumps(body).encode())
    assert_error_shape(resp, status, 400)
    assert resp["error"]["param"] == field


def test_completion_token_ids_outside_vocab(client, model):
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model=model, prompt=[1, 2, 10**9], max_tokens=1)


def test_unsupported_features_are_refused(client, model):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(
            model=model, messages=MSG, tools=[{"type": "code_interpreter"}],
        )
    assert e.value.body["param"] == "tools[0].type"


def test_body_over_limit_is_413(base_url):
    big = json.dumps({"messages": [{"role": "user", "content": "x" * (9 * 1024 * 1024)}]}).encode()
    status, body = raw_post(base_url, "/v1/chat/completions", big)
    assert_error_shape(body, status, 413)


def test_unknown_route_is_json_404(base_url):
    status, body = raw_post(base_url, "/v1/engines", b"{}")
    assert_error_shape(body, status, 404)


def test_server_still_serves_after_errors(client, model):
    r = client.chat.completions.create(model=model, messages=MSG, max_tokens=2, temperature=0)
    assert r.choices[0].finish_reason in ("stop", "length")


def test_models_health_and_metrics(base_url, client, model):
    raw_post(base_url, "/v1/chat/completions", b"{")
    client.chat.completions.create(model=model, messages=MSG, max_tokens=2)
    assert [m.id for m in client.models.list().data] == [model]
    with urllib.request.urlopen(f"{base_url}/health") as r:
        assert json.load(r)["status"] == "ok"
    with urllib.request.urlopen(f"{base_url}/metrics") as r:
        text = r.read().decode()
    for name in [
        'kiln_requests_total{endpoint="chat_completions",status="200"}',
        'kiln_requests_total{endpoint="chat_completions",status="400"}',
        "kiln_time_to_first_token_seconds_bucket",
        "kiln_inter_token_latency_seconds_bucket",
        "kiln_prompt_tokens_total",
        "kiln_generation_tokens_total",
        "kiln_requests_running",
        "kiln_requests_waiting",
        "kiln_kv_blocks_used",
        "kiln_kv_blocks_free",
    ]:
        assert name in text, name
