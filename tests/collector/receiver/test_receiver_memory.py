"""What collect holds in flight is bounded: concurrent in-limit requests cannot take the
process to gigabytes, and a request refused for memory is retried, never lost.

The server is a real ``handoffscope collect`` subprocess; its peak resident memory is read
from ``/proc/PID/status`` (``VmHWM``) and held to a bound derived from the configured budget.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import grpc
import pytest
from opentelemetry.exporter.otlp.json.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans as encode_proto
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from collector.receiver import CollectConfig, CollectService, Limits
from collector.receiver.budget import DECODE_FACTORS
from collector.receiver.grpc_server import SERVICE_NAME
from tests.support.receiver import collect_process, run_handoffs, span_keys

MIB = 1 << 20
BUDGET = 64 * MIB
CLIENTS = 12
BODY_BYTES = 3 * MIB
BOUND_S = 120.0
"""How long the test waits for the clients before failing: a bound on its runtime."""


def _bodies() -> list[tuple[bytes, set[str]]]:
    """``CLIENTS`` OTLP JSON requests of about ``BODY_BYTES`` each, with distinct span ids."""
    memory = InMemorySpanExporter()
    run_handoffs(memory, 10)
    document = encode_spans(memory.get_finished_spans()).to_dict()
    template = document["resourceSpans"][0]["scopeSpans"][0]["spans"]
    one = len(json.dumps(template[0]))
    count = BODY_BYTES // one
    bodies = []
    for client in range(CLIENTS):
        spans = []
        for n in range(count):
            span = dict(template[n % len(template)])
            span["spanId"] = f"{client + 1:04x}{n + 1:012x}"
            spans.append(span)
        document["resourceSpans"][0]["scopeSpans"][0]["spans"] = spans
        keys = {f"{s['traceId']}/{s['spanId']}" for s in spans}
        bodies.append((json.dumps(document).encode(), keys))
    return bodies


def _memory(pid: int) -> dict[str, int]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmHWM", "VmRSS"):
            fields[name] = int(value.split()[0]) * 1024
    return fields


def _post(url: str, body: bytes, content_type: str = "application/json") -> tuple[int, str | None]:
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=BOUND_S)
    try:
        connection.request("POST", parts.path, body=body, headers={"Content-Type": content_type})
        response = connection.getresponse()
        response.read()
        return response.status, response.getheader("Retry-After")
    finally:
        connection.close()


def test_concurrent_in_limit_json_requests_stay_within_the_memory_budget(tmp_path: Path):
    bodies = _bodies()
    assert all(len(body) < 8 * MIB for body, _ in bodies)
    out = tmp_path / "out"
    with collect_process(
        out, "--no-grpc", "--max-body-size", "8MiB", "--max-in-flight", f"{BUDGET // MIB}MiB"
    ) as collect:
        pid = collect.process.pid
        # Warm up: imports, caches and the first request's allocations are not the budget's.
        warm, warm_keys = bodies[0]
        assert _post(collect.http_url, warm)[0] == 200
        baseline = _memory(pid)["VmRSS"]

        statuses: list[list[int]] = [[] for _ in bodies]
        deadline = time.monotonic() + BOUND_S

        def client(i: int) -> None:
            body = bodies[i][0]
            while time.monotonic() < deadline:
                status, retry_after = _post(collect.http_url, body)
                statuses[i].append(status)
                if status == 200:
                    return
                assert status in (429, 503) and retry_after is not None, status
                time.sleep(0.05 * (i % 4))  # sooner than Retry-After: press the budget

        threads = [threading.Thread(target=client, args=(i,)) for i in range(1, len(bodies))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(BOUND_S)
        peak = _memory(pid)["VmHWM"]
        assert collect.stop() == 0
    assert all(s and s[-1] == 200 for s in statuses[1:]), "a client never got its 200"
    # Nothing accepted was lost, and nothing refused was half written.
    written = span_keys(out)
    expected = set().union(*(keys for _, keys in bodies))
    assert len(written) == len(expected) and set(written) == expected
    # Each request may hold its body and its decoding; together they stay in the budget,
    # except that one request is always let in alone, however large.
    one_request = BODY_BYTES * (2 + DECODE_FACTORS["application/json"])
    bound = baseline + max(BUDGET, one_request) + BUDGET // 2
    assert peak - baseline < bound - baseline, (
        f"peak RSS {peak / MIB:.0f} MiB over the bound {bound / MIB:.0f} MiB "
        f"(baseline {baseline / MIB:.0f} MiB, budget {BUDGET / MIB:.0f} MiB)"
    )


def _small_request() -> bytes:
    memory = InMemorySpanExporter()
    run_handoffs(memory, 1)
    return encode_proto(memory.get_finished_spans()).SerializeToString()


def test_over_the_budget_is_429_or_resource_exhausted_with_retry_after(tmp_path: Path):
    body = _small_request()
    config = CollectConfig(
        out_dir=tmp_path / "out",
        http_port=0,
        grpc_port=0,
        limits=Limits(max_in_flight_bytes=4 << 10),
    )
    with CollectService(config) as service:
        assert service.http_server is not None
        budget = service.http_server.ingest.budget
        held = budget.reservation()
        held.grow(budget.limit)  # another request holds the whole budget
        status, retry_after = _post(service.http_url or "", body, "application/x-protobuf")
        assert (status, retry_after) == (429, "1")
        with grpc.insecure_channel(service.grpc_address or "") as channel:
            export = channel.unary_unary(f"/{SERVICE_NAME}/Export")
            with pytest.raises(grpc.RpcError) as refused:
                export(body, timeout=BOUND_S)
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "memory budget" in (refused.value.details() or "")
        held.release()
        # Alone, a request is let in even though decoding it costs more than the budget.
        assert len(body) * DECODE_FACTORS["application/x-protobuf"] > budget.limit
        assert _post(service.http_url or "", body, "application/x-protobuf")[0] == 200
        assert budget.used == 0
    assert len(span_keys(tmp_path / "out")) == 4
