"""The handshake over A2A beside the handshake over HTTP: what each costs per handshake, in the
same run, on 127.0.0.1.

    .venv/bin/python bench/bench_a2a.py [--handshakes N] [--block B] [--json]

Three receivers run in uvicorn subprocesses pinned to one core, each the same ``Receiver``
(a ``MemoryStore``, a validator that accepts, an executor that returns a small dict, no
OpenTelemetry SDK installed): ``handshake_app`` (the HTTP binding), ``a2a_app`` (the A2A
binding), and ``a2a_app`` again with a2a-sdk's own tracing of its internals switched off
(``OTEL_INSTRUMENTATION_A2A_SDK_ENABLED=false``). The sender runs here, pinned to another core
when there is one, and hands over ``Sender.handoff`` after ``Sender.handoff`` (sequential: a
handshake is a propose and a commit, two round trips) through ``HttpChannel`` or
``A2AChannel``, in blocks that alternate between the receivers so that load hits all alike.

Reported per binding and payload shape: server CPU per handshake (from ``/proc``, the figure a
loaded machine does not inflate), client CPU per handshake, median wall time per handshake,
and the ratio of each to the HTTP binding's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx  # noqa: E402

from collector import Sender  # noqa: E402

BINDINGS = ("http", "a2a", "a2a-untraced")
SHAPES = {
    "small": lambda i: {"i": i},
    "4 KB": lambda i: {"i": i, "text": "x" * 4000, "tags": list(range(50))},
}


def build_app(binding: str, url: str) -> Any:
    """The same receiver behind the binding asked for."""
    from collector import MemoryStore, Receiver, accept

    receiver = Receiver(
        "bench",
        validator=lambda w: accept(eta_ms=10),
        executor=lambda w: {"ok": True, "task": w.task_id},
        store=MemoryStore(),
    )
    if binding == "http":
        from collector.http import handshake_app

        return handshake_app(receiver)
    from collector.a2a import a2a_app

    return a2a_app(receiver, url=url)


def serve(binding: str, port: int) -> None:
    import uvicorn

    _pin(0)
    url = f"http://127.0.0.1:{port}"
    uvicorn.run(
        build_app(binding, url), host="127.0.0.1", port=port, log_level="warning",
        access_log=False,
    )  # fmt: skip


def _pin(core: int) -> None:
    if hasattr(os, "sched_setaffinity") and core < (os.cpu_count() or 1):
        os.sched_setaffinity(0, {core})


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start(binding: str) -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    env = dict(os.environ)
    if binding == "a2a-untraced":
        env["OTEL_INSTRUMENTATION_A2A_SDK_ENABLED"] = "false"
    kind = "http" if binding == "http" else "a2a"
    proc = subprocess.Popen([sys.executable, __file__, "--serve", kind, str(port)], env=env)
    url = f"http://127.0.0.1:{port}"
    probe = "/healthz" if kind == "http" else "/.well-known/agent-card.json"
    for _ in range(400):
        try:
            if httpx.get(url + probe, timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.025)
    proc.kill()
    raise SystemExit(f"the {binding} bench server did not start")


def _cpu_s(pid: int) -> float:
    """CPU time (user + system) a process has used, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _channel(binding: str, url: str) -> Any:
    if binding == "http":
        from collector.http import HttpChannel

        return HttpChannel(url, peer="bench")
    from collector.a2a import A2AChannel

    return A2AChannel(url)


def run(n: int, block: int) -> dict[str, Any]:
    _pin(1)
    servers = {b: _start(b) for b in BINDINGS}
    sender = Sender("bench-sender")
    stamp = time.time()
    totals: dict[tuple[str, str], dict[str, Any]] = {
        (b, s): {"server_cpu": 0.0, "client_cpu": 0.0, "wall": [], "count": 0}
        for b in BINDINGS
        for s in SHAPES
    }
    channels = {b: _channel(b, url) for b, (_, url) in servers.items()}
    try:
        for b in BINDINGS:  # warm up: connections, imports, caches
            for i in range(20):
                sender.handoff(
                    channels[b], task_id="w", payload={"i": i}, output_schema="d@1",
                    idempotency_key=f"warm-{b}-{i}-{stamp}",
                )  # fmt: skip
        for start in range(0, n, block):
            for shape, make in SHAPES.items():
                for b in BINDINGS:
                    proc, _ = servers[b]
                    t = totals[(b, shape)]
                    s0, c0 = _cpu_s(proc.pid), time.process_time()
                    for i in range(start, start + block):
                        t0 = time.perf_counter()
                        outcome = sender.handoff(
                            channels[b], task_id=f"t{i}", payload=make(i), output_schema="d@1",
                            idempotency_key=f"{b}-{shape}-{i}-{stamp}",
                        )  # fmt: skip
                        t["wall"].append(time.perf_counter() - t0)
                        assert outcome.committed, outcome
                    t["server_cpu"] += _cpu_s(proc.pid) - s0
                    t["client_cpu"] += time.process_time() - c0
                    t["count"] += block
    finally:
        for channel in channels.values():
            channel.close()
        for proc, _ in servers.values():
            proc.terminate()
            proc.wait(10)
    out: dict[str, Any] = {}
    for (b, shape), t in totals.items():
        out.setdefault(shape, {})[b] = {
            "server_cpu_us": round(t["server_cpu"] / t["count"] * 1e6),
            "client_cpu_us": round(t["client_cpu"] / t["count"] * 1e6),
            "wall_median_ms": round(statistics.median(t["wall"]) * 1000, 2),
            "handshakes": t["count"],
        }
    for figures in out.values():
        base = figures["http"]
        for b in BINDINGS:
            f = figures[b]
            for key in ("server_cpu_us", "client_cpu_us", "wall_median_ms"):
                f[key.rsplit("_", 1)[0] + "_x_http"] = round(f[key] / base[key], 2)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--handshakes", type=int, default=300, help="per binding and shape")
    parser.add_argument("--block", type=int, default=25)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--serve", nargs=2, metavar=("BINDING", "PORT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        serve(args.serve[0], int(args.serve[1]))
        return 0
    result = run(args.handshakes, args.block)
    load = os.getloadavg()[0]
    if args.json:
        print(json.dumps({"load_average": load, "shapes": result}, indent=2))
        return 0
    print(f"load average {load:.1f}")
    for shape, figures in result.items():
        print(f"\npayload {shape}")
        print(f"  {'binding':<14}{'server CPU':>12}{'client CPU':>12}{'wall median':>13}")
        for b, f in figures.items():
            print(
                f"  {b:<14}{f['server_cpu_us']:>9} µs{f['client_cpu_us']:>9} µs"
                f"{f['wall_median_ms']:>10} ms   x{f['server_cpu_x_http']} server"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
