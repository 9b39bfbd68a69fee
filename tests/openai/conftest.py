"""Fixtures for the OpenAI-client tests.

The server under test is `KILN_BASE_URL` when set (run.sh starts one); otherwise a `kiln serve`
on a free loopback port is started here from `KILN_BIN` and stopped after the session.
"""

import json
import os
import signal
import socket
import subprocess
import time
import urllib.request

import openai
import pytest

MODEL = os.environ.get("KILN_MODEL", "dummy:tiny")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(base_url, proc=None, timeout=60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"kiln serve exited early with code {proc.returncode}")
        try:
            with urllib.request.urlopen(f"{base_url}/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"kiln serve at {base_url} not healthy after {timeout}s")


@pytest.fixture(scope="session")
def base_url():
    url = os.environ.get("KILN_BASE_URL")
    if url:
        wait_healthy(url)
        yield url
        return
    binary = os.environ.get("KILN_BIN", "target/debug/kiln")
    port = free_port()
    proc = subprocess.Popen([binary, "serve", "--model", MODEL, "--port", str(port)])
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc)
        yield url
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)


@pytest.fixture(scope="session")
def client(base_url):
    return openai.OpenAI(base_url=f"{base_url}/v1", api_key="unused", max_retries=0, timeout=120)


@pytest.fixture(scope="session")
def model(client):
    return client.models.list().data[0].id


@pytest.fixture(scope="session")
def max_context(base_url):
    with urllib.request.urlopen(f"{base_url}/v1/models") as r:
        return json.load(r)["data"][0]["max_model_len"]


def raw_post(base_url, path, body, headers=None):
    """POST raw bytes; returns (status, parsed JSON body)."""
    req = urllib.request.Request(
        f"{base_url}{path}",
        data=body,
        headers={"Content-Type": "application/json", **(headers or {})},
        method="POST",
    )
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())
