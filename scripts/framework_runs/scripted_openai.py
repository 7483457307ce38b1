"""A scripted OpenAI-compatible chat-completions server on 127.0.0.1, for frameworks that
record in a venv of their own and bring their own HTTP client.

Each agent's model client points at ``http://127.0.0.1:<port>/<agent>/v1``; the server answers
that agent's next scripted step, as the OpenAI API answers, streamed (server-sent events, with
a final usage chunk when ``stream_options.include_usage`` is set) or not. A step is a dict::

    {"tool": "transfer_to_writer", "args": "{}", "usage": (620, 18)}
    {"text": "Validate every handoff.", "usage": (980, 140, 512)}  # 512 of the 980 cached

Standard library only: it runs inside the framework's venv.
"""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODEL = "gpt-4o"
CREATED = 1767225600


def _usage(step: dict[str, Any]) -> dict[str, Any]:
    inp, out, *rest = step["usage"]
    cached = rest[0] if rest else 0
    return {
        "prompt_tokens": inp,
        "completion_tokens": out,
        "total_tokens": inp + out,
        "prompt_tokens_details": {"cached_tokens": cached, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0},
    }


def _tool_calls(n: int, step: dict[str, Any]) -> list[dict[str, Any]]:
    calls = step.get("calls") or [{"tool": step["tool"], "args": step.get("args", "{}")}]
    return [
        {
            "index": i,
            "id": f"call_{n}_{i}",
            "type": "function",
            "function": {"name": c["tool"], "arguments": c.get("args", "{}")},
        }
        for i, c in enumerate(calls)
    ]


def completion(n: int, step: dict[str, Any]) -> dict[str, Any]:
    """One ``chat.completion`` object for scripted step number ``n``."""
    message: dict[str, Any] = {"role": "assistant", "content": step.get("text")}
    tooled = "tool" in step or "calls" in step
    if tooled:
        message["tool_calls"] = [
            {k: v for k, v in c.items() if k != "index"} for c in _tool_calls(n, step)
        ]
    return {
        "id": f"chatcmpl-{n}",
        "object": "chat.completion",
        "created": CREATED,
        "model": MODEL,
        "choices": [
            {"index": 0, "message": message, "finish_reason": "tool_calls" if tooled else "stop"}
        ],
        "usage": _usage(step),
    }


def chunks(n: int, step: dict[str, Any], include_usage: bool) -> list[dict[str, Any]]:
    """The ``chat.completion.chunk`` objects of a streamed answer to step ``n``."""
    base = {"id": f"chatcmpl-{n}", "object": "chat.completion.chunk", "created": CREATED}
    base["model"] = MODEL
    tooled = "tool" in step or "calls" in step
    out = [{**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}]
    if tooled:
        delta: dict[str, Any] = {"tool_calls": _tool_calls(n, step)}
        out.append({**base, "choices": [{"index": 0, "delta": delta}]})
    else:
        text = step["text"]
        half = len(text) // 2
        for piece in (text[:half], text[half:]):
            out.append({**base, "choices": [{"index": 0, "delta": {"content": piece}}]})
    finish = "tool_calls" if tooled else "stop"
    out.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    if include_usage:
        out.append({**base, "choices": [], "usage": _usage(step)})
    return out


class ScriptedOpenAI:
    """The server: ``script`` maps an agent (the first path segment) to its steps in order.

    ``calls`` lists ``(agent, streamed)`` per answered request; a request for an agent whose
    steps are used up, or for an unknown path, is answered 500 and kept in ``errors``.
    """

    def __init__(self, script: dict[str, list[dict[str, Any]]]) -> None:
        self.steps = {agent: list(steps) for agent, steps in script.items()}
        self.calls: list[tuple[str, bool]] = []
        self.errors: list[str] = []
        self._lock = threading.Lock()
        self._counter = 0
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_args: Any) -> None:  # quiet: the run prints its own summary
                pass

            def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                parts = self.path.strip("/").split("/")
                agent = parts[0]
                with owner._lock:
                    if parts[1:] != ["v1", "chat", "completions"] or not owner.steps.get(agent):
                        owner.errors.append(f"unscripted request {self.path}")
                        self.send_error(500, "unscripted request")
                        return
                    step = owner.steps[agent].pop(0)
                    owner._counter += 1
                    n = owner._counter
                    streamed = bool(body.get("stream"))
                    owner.calls.append((agent, streamed))
                if streamed:
                    usage = bool((body.get("stream_options") or {}).get("include_usage"))
                    data = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks(n, step, usage))
                    payload = (data + "data: [DONE]\n\n").encode()
                    content_type = "text/event-stream"
                else:
                    payload = json.dumps(completion(n, step)).encode()
                    content_type = "application/json"
                self.send_response(200)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> "ScriptedOpenAI":
        self._thread.start()
        return self

    def __exit__(self, *_exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()

    def base_url(self, agent: str) -> str:
        """The OpenAI base URL that answers with ``agent``'s steps."""
        return f"http://127.0.0.1:{self._server.server_address[1]}/{agent}/v1"

    def unused(self) -> dict[str, int]:
        """Agents whose scripted steps were not all asked for, with how many are left."""
        return {agent: len(steps) for agent, steps in self.steps.items() if steps}
