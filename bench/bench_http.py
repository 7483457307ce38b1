"""The handshake over HTTP: handshakes per second, and the latency each phase adds to a bare
httpx round trip of the same size, in the same run.

    .venv/bin/python bench/bench_http.py [--handshakes N] [--concurrency C] [--json]

The receiver runs in a uvicorn subprocess pinned to one core (``handshake_app`` with a
``MemoryStore``, no SDK installed, a validator that accepts and an executor that returns a
small dict); the sender runs here, pinned to another core when there is one. The baseline is
a raw ASGI endpoint in the same server process that reads the body and answers bytes of the
size the real reply has, so the difference is what the handshake layer adds: routing, token
check, JSON Schema validation, decoding, the receiver's logic and the store, and the
channel's own work on the client side.

Reported: median latency per phase (propose, commit, void) and of the bare round trip with the
same request and reply sizes, the difference, and handshakes per second end to end
(``Sender.handoff`` over one ``HttpChannel``: sequential, and ``ahandoff`` with C in flight),
each beside bare round trips per second of the same httpx client in the same shape. A
handshake is two round trips (propose, commit), so half the bare rate is its ceiling.
"""

from __future__ import annotations

import argparse
import asyncio
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
from collector.http import HttpChannel, wire  # noqa: E402

TOKEN = "bench-token"
BARE = "/bare"


def build_app() -> Any:
    """The handshake app, plus a bare endpoint answering N bytes (``?n=N``)."""
    from collector import MemoryStore, Receiver, accept
    from collector.http import handshake_app

    async def avalidate(work: Any) -> Any:
        return accept(eta_ms=10)

    async def aexecute(work: Any) -> Any:
        return {"ok": True, "task": work.task_id}

    on_loop = os.environ.get("BENCH_HTTP_ASYNC_RECEIVER") == "1"
    receiver = Receiver(
        "bench",
        validator=avalidate if on_loop else (lambda w: accept(eta_ms=10)),
        executor=aexecute if on_loop else (lambda w: {"ok": True, "task": w.task_id}),
        store=MemoryStore(),
    )
    handshake = handshake_app(receiver, token=TOKEN)

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] == BARE:
            more = True
            while more:
                message = await receive()
                more = message.get("more_body", False)
            size = int(scope["query_string"].decode().partition("=")[2] or 0)
            body = b"x" * size
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"content-length", str(size).encode()),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": body})
            return
        await handshake(scope, receive, send)

    return app


def serve(port: int) -> None:
    import uvicorn

    uvicorn.run(build_app(), host="127.0.0.1", port=port, log_level="warning", access_log=False)


def _pin(core: int) -> None:
    if hasattr(os, "sched_setaffinity") and core < (os.cpu_count() or 1):
        os.sched_setaffinity(0, {core})


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start_server() -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    proc = subprocess.Popen([sys.executable, __file__, "--serve", str(port)])
    url = f"http://127.0.0.1:{port}"
    for _ in range(400):
        try:
            if httpx.get(url + wire.ROUTE_HEALTH, timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.025)
    proc.kill()
    raise SystemExit("the bench server did not start")


def _cpu_s(pid: int) -> float:
    """CPU time (user + system) a process has used, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _median_us(samples: list[float]) -> float:
    return statistics.median(samples) * 1e6


def phases(url: str, n: int, *, pid: int, block: int = 100) -> dict[str, dict[str, float]]:
    """What each phase costs beside a bare round trip of the same request and reply sizes.

    Per phase: the median wall latency (interleaved request by request with the bare trip,
    so load hits both alike), and the CPU time per request of the server process and of this
    client process, measured over blocks of ``block`` requests of one kind (CPU time is what
    a loaded machine does not inflate).
    """
    channel = HttpChannel(url, peer="bench", token=TOKEN)
    bare = httpx.Client(headers={"authorization": f"Bearer {TOKEN}"})
    deadline = int(time.time() * 1000) + 3_600_000
    stamp = time.time()
    kinds = ("propose", "commit", "void")
    wall: dict[str, list[float]] = {k: [] for k in kinds}
    bare_wall: dict[str, list[float]] = {k: [] for k in kinds}
    cpu: dict[str, list[float]] = {k: [0.0, 0.0, 0.0, 0.0] for k in kinds}
    sizes: dict[str, tuple[int, int]] = {}

    def messages(i: int) -> dict[str, dict[str, Any]]:
        key = f"k{i}-{stamp}"
        common = {"handoff_id": f"h{key}", "task_id": f"t{i}", "attempt": 1, "sender": "s",
                  "receiver": "bench", "idempotency_key": key, "payload": {"n": i}}  # fmt: skip
        return {
            "propose": {
                "kind": "propose",
                **common,
                "output_schema": "d@1",
                "deadline_unix_ms": deadline,
            },  # fmt: skip
            "commit": {"kind": "commit", **common},
            "void": {"kind": "void", "handoff_id": f"h{key}", "attempt": 1, "reason": "done"},
        }

    for kind, message in messages(-1).items():  # learn the sizes
        sizes[kind] = (len(json.dumps(message)), len(json.dumps(channel.request(message))))
    for start in range(0, n, block):
        batch = [messages(i) for i in range(start, start + block)]
        for kind in kinds:
            req, rep = sizes[kind]
            target, payload = f"{url}{BARE}?n={rep}", b"x" * req
            s0, c0 = _cpu_s(pid), time.process_time()
            for m in batch:
                t0 = time.perf_counter()
                channel.request(m[kind])
                wall[kind].append(time.perf_counter() - t0)
            s1, c1 = _cpu_s(pid), time.process_time()
            for _ in batch:
                t0 = time.perf_counter()
                bare.post(
                    target, content=payload, headers={"content-type": "application/json"}
                ).read()
                bare_wall[kind].append(time.perf_counter() - t0)
            s2, c2 = _cpu_s(pid), time.process_time()
            totals = cpu[kind]
            totals[0] += s1 - s0
            totals[1] += s2 - s1
            totals[2] += c1 - c0
            totals[3] += c2 - c1
    channel.close()
    bare.close()
    done = -(-n // block) * block
    out: dict[str, dict[str, float]] = {}
    for kind in kinds:
        req, rep = sizes[kind]
        phase, base = _median_us(wall[kind]), _median_us(bare_wall[kind])
        server, server_bare, client, client_bare = (x / done * 1e6 for x in cpu[kind])
        out[kind] = {
            "request_bytes": req,
            "reply_bytes": rep,
            "wall_us": round(phase, 1),
            "bare_wall_us": round(base, 1),
            "server_cpu_us": round(server, 1),
            "bare_server_cpu_us": round(server_bare, 1),
            "server_cpu_added_us": round(server - server_bare, 1),
            "client_cpu_us": round(client, 1),
            "bare_client_cpu_us": round(client_bare, 1),
            "client_cpu_added_us": round(client - client_bare, 1),
        }
    return out


def throughput(
    url: str, n: int, concurrency: int, *, pid: int, block: int = 25
) -> dict[str, float]:
    """Full handshakes per second, sequential (sync) and ``concurrency`` in flight (asyncio),
    each beside bare round trips per second of the same client in the same shape.

    Handshakes and bare trips alternate in blocks of ``block``, so load hits both alike.
    """
    sender = Sender("bench-sender")
    body, reply = b"x" * 200, f"{url}{BARE}?n=170"
    stamp = time.time()
    spent = {"seq": 0.0, "seq_bare": 0.0, "con": 0.0, "con_bare": 0.0}
    cpu = {"seq": 0.0, "seq_bare": 0.0}
    with HttpChannel(url, peer="bench", token=TOKEN) as channel, httpx.Client() as bare:
        for start in range(0, n, block):
            c0, t0 = _cpu_s(pid), time.perf_counter()
            for i in range(start, start + block):
                outcome = sender.handoff(
                    channel, task_id=f"s{i}", payload={"i": i}, output_schema="d@1",
                    idempotency_key=f"seq-{i}-{stamp}",
                )  # fmt: skip
                assert outcome.committed
            c1, t1 = _cpu_s(pid), time.perf_counter()
            for _ in range(block):
                bare.post(reply, content=body).read()
            spent["seq"] += t1 - t0
            spent["seq_bare"] += time.perf_counter() - t1
            cpu["seq"] += c1 - c0
            cpu["seq_bare"] += _cpu_s(pid) - c1

    async def many() -> None:
        async with HttpChannel(url, peer="bench", token=TOKEN) as ch, httpx.AsyncClient() as c:
            gate = asyncio.Semaphore(concurrency)

            async def one(i: int) -> None:
                async with gate:
                    outcome = await sender.ahandoff(
                        ch, task_id=f"a{i}", payload={"i": i}, output_schema="d@1",
                        idempotency_key=f"async-{i}-{stamp}",
                    )  # fmt: skip
                    assert outcome.committed

            async def trip() -> None:
                async with gate:
                    await c.post(reply, content=body)

            rounds = max(block, concurrency * 4)
            for start in range(0, n, rounds):
                t0 = time.perf_counter()
                await asyncio.gather(*(one(i) for i in range(start, start + rounds)))
                t1 = time.perf_counter()
                await asyncio.gather(*(trip() for _ in range(rounds)))
                spent["con"] += t1 - t0
                spent["con_bare"] += time.perf_counter() - t1

    asyncio.run(many())
    done = -(-n // block) * block
    done_con = -(-n // max(block, concurrency * 4)) * max(block, concurrency * 4)
    return {
        "server_cpu_us_per_handshake": round(cpu["seq"] / done * 1e6, 1),
        "server_cpu_us_per_bare_round_trip": round(cpu["seq_bare"] / done * 1e6, 1),
        "handshakes_per_server_core_second": round(done / cpu["seq"], 1),
        "sequential_handshakes_per_s": round(done / spent["seq"], 1),
        "sequential_bare_round_trips_per_s": round(done / spent["seq_bare"], 1),
        f"concurrent_{concurrency}_handshakes_per_s": round(done_con / spent["con"], 1),
        f"concurrent_{concurrency}_bare_round_trips_per_s": round(done_con / spent["con_bare"], 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--handshakes", type=int, default=500)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        _pin(1)
        serve(args.serve)
        return 0
    proc, url = _start_server()
    try:
        _pin(0)
        for _ in range(50):  # warm up connections, caches and the schema validators
            httpx.get(url + wire.ROUTE_HEALTH)
        phases(url, 100, pid=proc.pid)
        result: dict[str, Any] = {
            "phases": phases(url, args.handshakes, pid=proc.pid),
            "throughput": throughput(url, args.handshakes, args.concurrency, pid=proc.pid),
            "server_cores": 1,
        }
    finally:
        proc.terminate()
        proc.wait(10)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    columns = list(next(iter(result["phases"].values())))
    print("phase    " + " ".join(f"{c:>22}" for c in columns))
    for kind, row in result["phases"].items():
        print(f"{kind:8} " + " ".join(f"{row[c]:>22}" for c in columns))
    for name, value in result["throughput"].items():
        print(f"{name}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
