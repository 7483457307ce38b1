"""What keeps a recording in a framework's venv offline and scripted
(scripts/framework_runs/isolated.py and scripted_openai.py): the loopback-only guard refuses and
remembers every other connection, and the scripted server answers as the OpenAI API does,
streamed or not, with the cache-read tokens of its script."""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
from typing import Any

import pytest

from tests.support.paths import REPO

SCRIPTS = REPO / "scripts"
sys.path.insert(0, str(SCRIPTS))

from framework_runs.scripted_openai import ScriptedOpenAI  # noqa: E402

GUARDED = """
import json, socket, sys
sys.path.insert(0, sys.argv[1])
from framework_runs.isolated import LoopbackOnly
from framework_runs.scripted_openai import ScriptedOpenAI
guard = LoopbackOnly()
guard.install()
errors = []
for attempt in (
    lambda: socket.create_connection(("192.0.2.1", 443), timeout=1),
    lambda: socket.getaddrinfo("api.openai.com", 443),
    lambda: socket.socket().connect_ex(("198.51.100.7", 80)),
):
    try:
        attempt()
    except OSError as e:
        errors.append(str(e))
with ScriptedOpenAI({"a": [{"text": "hi", "usage": (3, 1)}]}) as server:
    port = int(server.base_url("a").split(":")[2].split("/")[0])
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    sock.close()
print(json.dumps({"refused": guard.refused, "errors": errors}))
"""


def test_the_guard_refuses_and_remembers_all_but_loopback() -> None:
    # a fresh interpreter: the guard patches the socket module for good
    run = subprocess.run(
        [sys.executable, "-c", GUARDED, str(SCRIPTS)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    out = json.loads(run.stdout)
    assert out["refused"] == [
        "lookup '192.0.2.1'",
        "lookup 'api.openai.com'",
        "connect ('198.51.100.7', 80)",
    ]
    assert len(out["errors"]) == 3 and all("offline" in e for e in out["errors"])


def _post(server: ScriptedOpenAI, agent: str, body: dict[str, Any]) -> tuple[int, str]:
    host, rest = server.base_url(agent).removeprefix("http://").split("/", 1)
    conn = http.client.HTTPConnection(host, timeout=10)
    conn.request("POST", f"/{rest}/chat/completions", json.dumps(body))
    response = conn.getresponse()
    text = response.read().decode()
    conn.close()
    return response.status, text


SCRIPT = {
    "writer": [
        {"tool": "transfer_to_editor", "args": '{"why": "done"}', "usage": (100, 7)},
        {"text": "All done.", "usage": (200, 9, 150)},
    ]
}


def test_each_agent_gets_its_own_steps_in_order_then_an_error() -> None:
    with ScriptedOpenAI(SCRIPT) as server:
        status, text = _post(server, "writer", {"messages": []})
        first = json.loads(text)
        assert status == 200 and first["choices"][0]["finish_reason"] == "tool_calls"
        call = first["choices"][0]["message"]["tool_calls"][0]
        assert call["function"] == {"name": "transfer_to_editor", "arguments": '{"why": "done"}'}
        assert "index" not in call
        status, text = _post(server, "writer", {"messages": []})
        usage = json.loads(text)["usage"]
        assert usage["prompt_tokens_details"]["cached_tokens"] == 150
        assert (usage["prompt_tokens"], usage["completion_tokens"]) == (200, 9)
        assert _post(server, "writer", {})[0] == 500  # its script is used up
        assert _post(server, "editor", {})[0] == 500  # no script at all
        assert server.calls == [("writer", False), ("writer", False)]
        assert len(server.errors) == 2 and server.unused() == {}


@pytest.mark.parametrize("include_usage", [True, False])
def test_a_streamed_answer_is_server_sent_events(include_usage: bool) -> None:
    body = {"stream": True, "stream_options": {"include_usage": include_usage}}
    with ScriptedOpenAI(SCRIPT) as server:
        _post(server, "writer", body)
        status, text = _post(server, "writer", body)
        assert server.unused() == {} and server.calls[-1] == ("writer", True)
    events = [line.removeprefix("data: ") for line in text.split("\n\n") if line]
    assert status == 200 and events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    text_out = "".join(
        c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"]
    )
    assert text_out == "All done."
    usage = [c["usage"] for c in chunks if c.get("usage")]
    if include_usage:
        assert usage == [
            {
                "prompt_tokens": 200,
                "completion_tokens": 9,
                "total_tokens": 209,
                "prompt_tokens_details": {"cached_tokens": 150, "audio_tokens": 0},
                "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0},
            }
        ]
    else:
        assert usage == []
