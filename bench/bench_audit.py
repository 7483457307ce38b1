"""Benchmark of ``handoffscope audit``, as ratios against baselines measured in the same run.

    python bench/bench_audit.py --spans 1000000            # generates the file if missing
    python bench/bench_audit.py --spans 1000000 --big 10000000 --write docs/benchmarks/auditor.md

Each measurement runs in its own process, so its peak memory (ru_maxrss) is its own:

* ``shred``: DuckDB shredding the file into a table of spans with ``read_json`` and an
  explicit ``columns=`` struct of the OTLP fields the rules use (ids, name, kind, times,
  attributes, status, resource and scope) - the query a user would write instead;
* ``shred_events``: the same with the spans' events and links in the struct too, which the
  rules also read (state transitions are events), measured beside it with ``--json-only``;
* ``parse``: DuckDB merely parsing the JSON-lines file (``read_json``, every export request
  unnested once) - the floor any DuckDB-based audit stands on;
* ``audit``: ``load_traces`` + ``audit`` (all 19 rules and every figure) + the JSON report;
* ``python``: a straightforward pure-Python audit of the same file (``json.loads`` per line,
  dicts per span, the rules as loops) - what the auditor replaces;
* ``compact`` then ``parquet``: the same audit from the Parquet that ``compact`` writes;
* ``store``: ``handoffscope audit STORE --format json`` as a whole process (interpreter,
  imports, audit, report on stdout), first with nothing kept beside the store and then
  repeated (answered from the kept report), and with ``--before CHECKOUT`` the same command
  of another version side by side (``--before-python`` its interpreter, ``--before-store``
  a store its own ``compact`` wrote).
  Between them, for each version, first audits with new settings (a new
  ``--validation-timeout``, the same for both, then ``--fail-on never``, then the table
  report, the default format, with another new timeout) of a store whose
  rules' findings and figures are kept beside it.

    python bench/bench_audit.py --store-only --store /tmp/s/new.parquet --before /tmp/old
        --before-python /tmp/old/.venv/bin/python --before-store /tmp/s/old.parquet

With ``--json-only`` only the shred, the count-only scan (``parse``) and the audit of JSON
lines run; ``--frameworks N`` measures the same on a second corpus, N spans shaped as other
frameworks write them (``bench/framework_corpus.py``), in the same run, and a summary line
per corpus closes the output:

    python bench/bench_audit.py --dir /tmp/hs40 --json-only --frameworks 400000 --repeat 2

With ``--json-before CHECKOUT`` the audit of another version (that checkout's own
``bench_audit.py --child audit``) runs beside it, interleaved, ``--repeat`` times:

    python bench/bench_audit.py --dir /tmp/i19bench --json-only --json-before /tmp/old --repeat 2

With ``--files N`` the same spans are first split into N files, in order, as an exporter that
rotates its file writes them, and both the shred and the audit read them all.

Every measurement of JSON lines starts with the files read once just before it, so that
each side finds them in the page cache, as files an exporter has just written are: a
virtual machine that reclaims its page cache in the background otherwise makes a side's
time depend on how much of the input it happened to find there.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))


# --------------------------------------------------------------------------------------
# Children: one measurement each, printing {"seconds", "peak_mb", ...} as JSON
# --------------------------------------------------------------------------------------
def child_parse(path: str) -> dict[str, Any]:
    import duckdb

    con = duckdb.connect()
    con.execute("SET enable_progress_bar = false")
    started = time.perf_counter()
    (requests,) = con.execute(
        "SELECT sum(len(resourceSpans)) FROM read_json(?, format='newline_delimited')", [path]
    ).fetchall()[0]
    return {"seconds": time.perf_counter() - started, "resource_spans": requests}


_VALUE = (
    "STRUCT(stringValue VARCHAR, intValue VARCHAR, doubleValue VARCHAR, boolValue VARCHAR,"
    " arrayValue JSON, kvlistValue JSON)"
)
_KEY_VALUES = f"STRUCT(key VARCHAR, value {_VALUE})[]"
SHRED_COLUMNS = (
    "{'resourceSpans': 'STRUCT(resource STRUCT(attributes "
    + _KEY_VALUES
    + "), scopeSpans STRUCT(scope STRUCT(name VARCHAR, version VARCHAR), spans STRUCT("
    "traceId VARCHAR, spanId VARCHAR, parentSpanId VARCHAR, name VARCHAR, kind VARCHAR,"
    " startTimeUnixNano VARCHAR, endTimeUnixNano VARCHAR, attributes "
    + _KEY_VALUES
    + ", status STRUCT(code VARCHAR, message VARCHAR))[])[])[]'}"
)
"""The explicit schema of the shred: the OTLP fields the issue that set the goal named (ids,
name, kind, times, attributes, status, resource and scope)."""

SHRED_EVENTS_COLUMNS = SHRED_COLUMNS.replace(
    ", status STRUCT(",
    f", events STRUCT(timeUnixNano VARCHAR, name VARCHAR, attributes {_KEY_VALUES})[],"
    f" links STRUCT(traceId VARCHAR, spanId VARCHAR, attributes {_KEY_VALUES})[],"
    " status STRUCT(",
)
"""The same with the spans' events and links, which the rules read too (the state
transitions are events): every OTLP field the audit reads."""
assert SHRED_EVENTS_COLUMNS != SHRED_COLUMNS


def child_shred(path: str, columns: str = SHRED_COLUMNS) -> dict[str, Any]:
    import duckdb

    con = duckdb.connect()
    con.execute("SET enable_progress_bar = false")
    started = time.perf_counter()
    con.execute(
        "CREATE TABLE spans AS SELECT rs.resource, ss.scope, unnest(ss.spans, recursive := true)"
        " FROM (SELECT rs, unnest(rs.scopeSpans) AS ss FROM (SELECT unnest(resourceSpans) AS rs"
        f" FROM read_json(?, format = 'newline_delimited', columns = {columns})))",
        [path],
    )
    seconds = time.perf_counter() - started
    (spans,) = con.execute("SELECT count(*) FROM spans").fetchall()[0]
    return {"seconds": seconds, "spans": spans}


def child_shred_events(path: str) -> dict[str, Any]:
    return child_shred(path, SHRED_EVENTS_COLUMNS)


def child_audit(path: str) -> dict[str, Any]:
    from auditor import audit, load_traces
    from auditor.report import render_chunks

    started = time.perf_counter()
    traces = load_traces(path)
    loaded = time.perf_counter()
    result = audit(traces)
    audited = time.perf_counter()
    spans = traces.span_count
    # The whole audit, the JSON report too, as `handoffscope audit --format json` writes it:
    # DuckDB closed first, the report's UTF-8 in chunks, never joined into one text.
    traces.con.close()
    report = render_chunks(result, "json")
    done = time.perf_counter()
    return {
        "seconds": done - started,
        "load_seconds": loaded - started,
        "audit_seconds": audited - loaded,
        "report_seconds": done - audited,
        "report_bytes": sum(len(chunk) for chunk in report),
        "spans": spans,
        "findings": len(result.findings),
    }


def child_compact(path: str, out: str) -> dict[str, Any]:
    from auditor import load_traces
    from auditor.audit import prepare
    from auditor.stores.compact import write_parquet
    from auditor.stores.saved import save

    started = time.perf_counter()
    traces = load_traces(path)
    written = write_parquet(traces, out, force=True)
    # As `handoffscope compact` does: the derived tables saved beside the store.
    prepare(traces.con)
    save(traces.con, written)
    return {"seconds": time.perf_counter() - started, "bytes": os.path.getsize(out)}


def child_python(path: str) -> dict[str, Any]:
    started = time.perf_counter()
    findings = python_audit(path)
    return {"seconds": time.perf_counter() - started, "findings": findings}


def python_audit(path: str) -> int:
    """The audit written the obvious way: parse every line, keep dicts, loop over them."""

    def value(v: dict[str, Any]) -> Any:
        for key in ("stringValue", "intValue", "doubleValue", "boolValue"):
            if key in v:
                return v[key]
        if "arrayValue" in v:
            return [value(x) for x in v["arrayValue"].get("values", [])]
        return None

    seen: set[tuple[str, str]] = set()
    phases: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    roots: list[dict[str, Any]] = []
    proceeds: set[tuple[str, str]] = set()
    spend: dict[str, list[float]] = defaultdict(lambda: [0, 0, 0.0])
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            try:
                doc = json.loads(line)
            except ValueError:
                continue
            for rs in doc.get("resourceSpans", []):
                for ss in rs.get("scopeSpans", []):
                    for span in ss.get("spans", []):
                        key = (span.get("traceId", ""), span.get("spanId", ""))
                        if key in seen:
                            continue
                        seen.add(key)
                        a = {
                            kv["key"]: value(kv.get("value", {}))
                            for kv in span.get("attributes", [])
                        }
                        s = {
                            "trace": key[0],
                            "name": span.get("name"),
                            "a": a,
                            "start": int(span.get("startTimeUnixNano", 0)),
                            "end": int(span.get("endTimeUnixNano", 0)),
                        }
                        agent = a.get("gen_ai.agent.name")
                        if agent and "gen_ai.usage.input_tokens" in a:
                            row = spend[agent]
                            row[0] += int(a["gen_ai.usage.input_tokens"])
                            row[1] += int(a.get("gen_ai.usage.output_tokens") or 0)
                            row[2] += float(a.get("handoff.cost_usd") or 0)
                        if s["name"] in ("handoff.propose", "handoff.validate", "handoff.commit"):
                            phases[(key[0], a.get("handoff.id", ""))].append(s)
                        elif a.get("gen_ai.operation.name") == "invoke_workflow":
                            roots.append(s)
                        elif s["name"] == "handoff.decision":
                            if a.get("handoff.policy.action") == "proceed":
                                proceeds.add((key[0], a.get("handoff.task_id", "")))
    findings = 0
    latencies: dict[str, list[float]] = defaultdict(list)
    executions: dict[tuple[Any, Any], int] = defaultdict(int)
    for spans in phases.values():
        by_attempt: dict[int, dict[str, list[dict[str, Any]]]] = defaultdict(
            lambda: defaultdict(list)
        )
        for s in spans:
            by_attempt[int(s["a"].get("handoff.attempt", 1))][s["name"]].append(s)
        flagged: set[str] = set()
        for attempt, names in sorted(by_attempt.items()):
            validates = names.get("handoff.validate", [])
            commits = names.get("handoff.commit", [])
            for p in names.get("handoff.propose", []):
                a = p["a"]
                if not a.get("handoff.idempotency_key"):
                    flagged.add("missing-idempotency-key")
                if not all(
                    a.get(k)
                    for k in (
                        "handoff.sender",
                        "handoff.receiver",
                        "handoff.payload_version",
                        "handoff.schema",
                    )
                ):
                    flagged.add("missing-handoff-metadata")
                if attempt > int(a.get("handoff.max_attempts") or 3):
                    flagged.add("retry-cap-exceeded")
                status = a.get("handoff.consumed.status")
                if (
                    status
                    and status not in ("complete", "completed")
                    and (p["trace"], a.get("handoff.consumed.task_id")) not in proceeds
                ):
                    flagged.add("silent-propagation")
                deadline = a.get("handoff.deadline_unix_ms")
                for c in commits:
                    if deadline and c["end"] // 1_000_000 > int(deadline):
                        flagged.add("deadline-missed")
            for v in validates:
                a = v["a"]
                latency = a.get("handoff.validation_latency_ms")
                if latency is not None:
                    latencies[a.get("handoff.receiver", "")].append(float(latency))
                    if float(latency) > 2000:
                        findings += 1
                decision = a.get("handoff.decision")
                if decision == "reject" and not a.get("handoff.reject_reason"):
                    flagged.add("reject-without-reason")
                if decision == "accept" and a.get("handoff.eta_ms") is None:
                    flagged.add("accept-without-eta")
                if decision == "accept" and not commits:
                    flagged.add("abandoned-accept")
                if commits and a.get("handoff.late"):
                    flagged.add("late-validation-used")
                elif commits and decision != "accept":
                    flagged.add("commit-without-accept")
            if commits and not validates:
                flagged.add("fire-and-forget")
            for c in commits:
                a = c["a"]
                if a.get("handoff.commit.outcome") == "executed":
                    executions[(a.get("handoff.receiver"), a.get("handoff.idempotency_key"))] += 1
                    if a.get("handoff.cost_usd") is None:
                        flagged.add("missing-cost-attribution")
                if str(a.get("handoff.external_effect.performed")).lower() == "true" and not a.get(
                    "handoff.approval"
                ):
                    flagged.add("external-effect-without-approval")
        findings += len(flagged)
    findings += sum(1 for (_, k), n in executions.items() if k and n > 1)
    findings += sum(1 for r in roots if int(r["a"].get("handoff.workflow.attempt") or 1) > 1)
    for values in latencies.values():
        values.sort()
        pos = 0.95 * (len(values) - 1)
        lo = int(pos)
        hi = min(lo + 1, len(values) - 1)
        if values[lo] + (values[hi] - values[lo]) * (pos - lo) > 500:
            findings += 1
    return findings


def child_main(task: str, args: list[str]) -> None:
    tasks: dict[str, Callable[..., dict[str, Any]]] = {
        "parse": child_parse,
        "shred": child_shred,
        "shred_events": child_shred_events,
        "audit": child_audit,
        "compact": child_compact,
        "python": child_python,
    }
    out = tasks[task](*args)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    out["peak_mb"] = usage.ru_maxrss / 1024
    # CPU seconds (all threads): on a shared machine, the figure that load does not inflate.
    out["cpu_seconds"] = usage.ru_utime + usage.ru_stime
    print(json.dumps(out))


# --------------------------------------------------------------------------------------
# Parent: generate, measure, report
# --------------------------------------------------------------------------------------
def measure(task: str, *args: str) -> dict[str, Any]:
    print(f"bench_audit: {task} {' '.join(args)} ...", file=sys.stderr, flush=True)
    done = subprocess.run(
        [sys.executable, __file__, "--child", task, *args],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1] if done.stderr else "failed"}
    result = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"bench_audit:   {result}", file=sys.stderr, flush=True)
    return result


def best(repeat: int, task: str, *args: str) -> dict[str, Any]:
    """The fastest of ``repeat`` runs of ``task`` (the machine is shared: the rest is noise)."""
    runs = [measure(task, *args) for _ in range(max(1, repeat))]
    ok = [r for r in runs if "error" not in r]
    return min(ok, key=lambda r: r["seconds"]) if ok else runs[0]


def rotated(path: Path, files: int) -> Path:
    """The lines of ``path`` split into ``files`` files of about equal size, in order, as
    an exporter that rotates its file writes them (made once, beside ``path``); returns the
    glob pattern that names them, which the shred and the audit both take."""
    folder = path.with_name(f"{path.stem}-in-{files}-files")
    if not folder.is_dir():
        partial = folder.with_name(folder.name + ".partial")
        partial.mkdir(exist_ok=True)
        share = path.stat().st_size / files
        with path.open("rb") as lines:
            number, written, out = 0, 0, None
            for line in lines:
                if out is None or (written >= share * (number + 1) and number + 1 < files):
                    if out is not None:
                        out.close()
                    number += out is not None
                    out = (partial / f"part-{number:03d}.jsonl").open("wb")
                out.write(line)
                written += len(line)
            if out is not None:
                out.close()
        partial.rename(folder)
    return folder / "*.jsonl"


def warm(path: Path) -> None:
    """Read the files ``path`` names (a file or a glob pattern) once, into the page cache."""
    for name in sorted(path.parent.glob(path.name)):
        with name.open("rb") as f:
            while f.read(16 * 1024 * 1024):
                pass


def compiled(*checkouts: Path | None) -> None:
    """Write the bytecode of each checkout's packages, as installing them does. Where
    ``PYTHONDONTWRITEBYTECODE`` is set (this machine sets it), a process running from a
    checkout compiles every module it imports again each time it starts, and an audit of a
    store, which takes under a second, was measured doing that too."""
    import compileall

    for checkout in checkouts:
        for package in ("auditor", "collector"):
            if checkout is not None and (checkout / package).is_dir():
                compileall.compile_dir(checkout / package, quiet=1)


def measure_json(path: Path, before: Path | None, repeat: int) -> dict[str, Any]:
    """The shred and the audit of ``path`` (and with ``before`` that checkout's audit), one
    process each, interleaved so that every side sees the same load; the best of each."""
    sides: dict[str, list[str]] = {
        "shred": [sys.executable, __file__, "--child", "shred", str(path)],
        "shred_events": [sys.executable, __file__, "--child", "shred_events", str(path)],
        "parse": [sys.executable, __file__, "--child", "parse", str(path)],
        "audit": [sys.executable, __file__, "--child", "audit", str(path)],
    }
    if before is not None:
        other = str(before / "bench" / "bench_audit.py")
        sides["before"] = [sys.executable, other, "--child", "audit", str(path)]
    runs: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for _ in range(max(1, repeat)):
        for name, command in sides.items():
            print(f"bench_audit: {name} {path} ...", file=sys.stderr, flush=True)
            warm(path)
            done = subprocess.run(command, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                result = {"error": (done.stderr.strip().splitlines() or ["failed"])[-1]}
            else:
                result = json.loads(done.stdout.strip().splitlines()[-1])
            print(f"bench_audit:   {result}", file=sys.stderr, flush=True)
            runs[name].append(result)
    out: dict[str, Any] = {"runs": runs}
    for name, found in runs.items():
        ok = [r for r in found if "error" not in r]
        out[name] = min(ok, key=lambda r: r["seconds"]) if ok else found[0]
    for base in ("shred", "shred_events", "parse"):
        shred = out[base]
        for name in ("audit", "before"):
            r = out.get(name, {})
            if "seconds" in r and "seconds" in shred:
                r[f"vs_{base}"] = r["seconds"] / shred["seconds"]
                r[f"vs_{base}_cpu"] = r["cpu_seconds"] / shred["cpu_seconds"]
    return out


_THRESHOLD = iter(range(1001, 1_000_000))
"""A --validation-timeout no audit has used before (ms), one per measurement."""


def measure_store(
    label: str,
    python: str,
    store: Path,
    *,
    fresh: bool,
    parts: bool = False,
    extra: tuple[str, ...] = (),
    fmt: str = "json",
) -> dict[str, Any]:
    """``handoffscope audit STORE --format FMT`` as one whole process of ``python``: wall and
    CPU seconds and peak memory of that process (``os.wait4``), and a digest of its report
    (for JSON, as read back; for the table, its text).
    With ``fresh``, the reports kept beside the store are removed first, and without
    ``parts`` each rule's findings and the figures' rows kept there too. ``extra`` options
    are passed on."""
    import hashlib
    import shutil
    import tempfile

    if fresh:
        for kept in store.parent.glob(f".{store.name}.derived/reports"):
            shutil.rmtree(kept)
        for kept in store.parent.glob(f".{store.name}.derived/parts"):
            if not parts:
                shutil.rmtree(kept)
    print(f"bench_audit: {label} audit {store} {' '.join(extra)}...", file=sys.stderr, flush=True)
    # /usr/bin/time reports the child's own peak: a forked child's ru_maxrss starts at this
    # (large) process's. A neutral folder, so `-m` imports the version ``python`` has.
    command = [python, "-m", "auditor.cli", "audit", str(store.resolve()), "--format", fmt]
    command += extra
    with tempfile.TemporaryDirectory() as folder, tempfile.TemporaryFile() as out:
        timing = Path(folder) / "time"
        started = time.perf_counter()
        done = subprocess.run(
            ["/usr/bin/time", "-f", "%U %S %M", "-o", str(timing), *command],
            stdout=out,
            stderr=subprocess.DEVNULL,
            cwd=folder,
            check=False,
        )
        seconds = time.perf_counter() - started
        user, system, peak_kb = timing.read_text().split()[-3:]
        out.seek(0)
        text = out.read()
    if done.returncode not in (0, 1):
        return {"error": f"exit {done.returncode}"}
    result: dict[str, Any] = {
        "seconds": seconds,
        "cpu_seconds": float(user) + float(system),
        "peak_mb": int(peak_kb) / 1024,
        "exit": done.returncode,
    }
    if fmt == "json":
        report = json.loads(text, parse_int=float)
        result["findings"] = len(report["findings"])
        del report["files"]  # the store's path
        # Integers read as floats: a store whose saved sums came back as floats prints
        # 2012390.0 where another prints 2012390, the same figure.
        digested = json.dumps(report, sort_keys=True).encode()
    else:
        result["bytes"] = len(text)
        digested = text.replace(str(store.resolve()).encode(), b"")
    result["sha256"] = hashlib.sha256(digested).hexdigest()[:16]
    print(f"bench_audit:   {result}", file=sys.stderr, flush=True)
    return result


def measure_stores(args: argparse.Namespace, store: Path) -> dict[str, Any]:
    """The store audits as whole processes: first and repeated, this version and
    ``--before``, interleaved so that both see the same load; the best of ``--repeat``."""
    sides = [("now", sys.executable, store)]
    if args.before:
        sides.append(("before", args.before_python, args.before_store or store))
    runs: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for _ in range(max(1, args.repeat)):
        # First audits with new settings, each rule's findings and the figures kept by the
        # first audit: a new threshold (two rules run again), a new --fail-on (none); their
        # reports differ from the others in those settings alone. Both sides get the same
        # threshold, so the same findings.
        threshold = ("--validation-timeout", f"{next(_THRESHOLD)}ms")
        table = ("--validation-timeout", f"{next(_THRESHOLD)}ms")
        fail_on = ("--fail-on", "never")
        for label, python, path in sides:
            runs[f"{label}_first"].append(measure_store(label, python, path, fresh=True))
            runs[f"{label}_again"].append(measure_store(label, python, path, fresh=False))
            runs[f"{label}_threshold"].append(
                measure_store(label, python, path, fresh=True, parts=True, extra=threshold)
            )
            runs[f"{label}_fail_on"].append(
                measure_store(label, python, path, fresh=True, parts=True, extra=fail_on)
            )
            # The default format, which shows each rule's first few findings.
            runs[f"{label}_table"].append(
                measure_store(label, python, path, fresh=True, parts=True, extra=table, fmt="table")
            )
    out: dict[str, Any] = {"runs": runs}
    for key, found in runs.items():
        ok = [r for r in found if "error" not in r]
        out[key] = min(ok, key=lambda r: r["seconds"]) if ok else found[0]
    return out


def store_report(figures: dict[str, Any], command: str) -> str:
    """The store measurements as a Markdown table."""
    lines = [
        f"Command: `{command}`",
        "",
        "| `handoffscope audit STORE --format json`, whole process | seconds | CPU seconds"
        " | peak memory | findings |",
        "|---|---:|---:|---:|---:|",
    ]
    names = {
        "before_first": "before, first audit",
        "before_again": "before, repeated",
        "now_first": "now, first audit (nothing kept)",
        "now_again": "now, repeated (the kept report)",
        "now_threshold": "now, first audit with a new --validation-timeout (rules' findings kept)",
        "before_threshold": "before, the same",
        "now_fail_on": "now, first audit with --fail-on never (rules' findings kept)",
        "before_fail_on": "before, the same",
        "now_table": "now, the table (`--format table`) with another new --validation-timeout",
        "before_table": "before, the same",
    }
    for key, name in names.items():
        r = figures.get(key)
        if r is None:
            continue
        if "error" in r:
            lines.append(f"| {name} | {_failed(r['error'])} | | | |")
            continue
        found = f"{r['findings']:,}" if "findings" in r else f"({r['bytes']:,} bytes)"
        lines.append(
            f"| {name} | {r['seconds']:.2f} | {r['cpu_seconds']:.2f} | {r['peak_mb']:.0f} MB"
            f" | {found} |"
        )
    alike = []
    for same in (("first", "again"), ("threshold",), ("fail_on",), ("table",)):
        keys = {f"{side}_{kind}" for side in ("now", "before") for kind in same}
        digests = {r["sha256"] for k, r in figures.items() if k in keys and "sha256" in r}
        alike.append(len(digests) == 1)
    lines += ["", f"Reports alike (integers read as floats): {all(alike)}.", ""]
    return "\n".join(lines)


def ensure(path: Path, spans: int) -> dict[str, Any]:
    from bench.gen_traces import generate

    if path.exists():
        return {"file": str(path), "bytes": path.stat().st_size, "reused": True}
    print(f"bench_audit: generating {spans:,} spans into {path} ...", file=sys.stderr, flush=True)
    return generate(path, spans=spans)


def report(figures: dict[str, Any], command: str) -> str:
    m = figures["1m"]
    lines = [
        "# Auditor benchmark",
        "",
        f"Command: `{command}`",
        "",
        f"Machine: {figures['machine']}. Each figure is one run of a fresh process; the ratios "
        "compare measurements taken in the same run on the same file.",
        "",
        f"Input: {m['file']['spans'] if 'spans' in m['file'] else ''} spans of real handoffscope "
        f"traces (`bench/gen_traces.py`, copies of `sample_traces/fault-mix`), "
        f"{m['file']['bytes'] / 1e9:.2f} GB of OTLP JSON lines.",
        "",
        "| measurement | seconds | CPU seconds | peak memory | goal |",
        "|---|---:|---:|---:|---|",
    ]

    def row(name: str, r: dict[str, Any], goal: str) -> None:
        if "error" in r:
            lines.append(f"| {name} | {_failed(r['error'])} | | | {goal} |")
        else:
            cpu = r.get("cpu_seconds")
            cpu_text = "" if cpu is None else f"{cpu:.1f}"
            lines.append(
                f"| {name} | {r['seconds']:.2f} | {cpu_text} | {r['peak_mb']:.0f} MB | {goal} |"
            )

    row("DuckDB shredding the file (`read_json`, explicit `columns=`)", m["shred"], "baseline")
    row("DuckDB parsing the file (`read_json`, detected schema)", m["parse"], "-")
    row(
        "handoffscope audit, JSON lines (load + 18 rules + figures)",
        m["audit"],
        "at most 2x the shred; at most 1 GB",
    )
    row("pure-Python audit", m["python"], "baseline")
    row("compact to Parquet", m["compact"], "-")
    row("handoffscope audit, Parquet", m["parquet"], "under 1 s")
    if "10m" in figures:
        row(
            f"handoffscope audit, {figures['10m'].get('spans', '10M')} spans",
            figures["10m"]["audit"],
            "must finish",
        )
    ratios = figures["ratios"]
    lines += [
        "",
        "| ratio | measured | goal |",
        "|---|---:|---|",
        f"| audit / DuckDB shred | {ratios['audit_vs_shred']:.2f}x | at most 2x (aim 1.25x) |",
        f"| ... in CPU seconds | {ratios['audit_vs_shred_cpu']:.2f}x | |",
        f"| audit / DuckDB parse | {ratios['audit_vs_parse']:.2f}x | |",
        f"| ... in CPU seconds | {ratios['audit_vs_parse_cpu']:.2f}x | |",
        f"| pure Python / audit | {_times(ratios['python_vs_audit'])} | at least 30x |",
        "",
    ]
    return "\n".join(lines)


def json_summary(measured: dict[str, dict[str, Any]], load: tuple[float, ...]) -> str:
    """One line per corpus of ``--json-only``: the best audit, shred and count-only scan,
    their ratios in wall and CPU seconds, and each one's peak memory."""
    lines = [f"load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} at the end"]
    for name, m in measured.items():
        audit, shred, parse = m.get("audit", {}), m.get("shred", {}), m.get("parse", {})
        if not all("seconds" in r for r in (audit, shred, parse)):
            lines.append(f"{name}: a measurement failed")
            continue
        lines.append(
            f"{name} ({audit.get('spans', 0):,} spans, {m['file']['bytes'] / 1e9:.2f} GB,"
            f" {audit.get('findings', 0):,} findings): audit {audit['seconds']:.1f} s"
            f" ({audit['cpu_seconds']:.1f} CPU s, {audit['peak_mb']:.0f} MB),"
            f" shred {shred['seconds']:.1f} s ({shred['cpu_seconds']:.1f} CPU s,"
            f" {shred['peak_mb']:.0f} MB), count-only scan {parse['seconds']:.1f} s"
            f" ({parse['cpu_seconds']:.1f} CPU s, {parse['peak_mb']:.0f} MB);"
            f" audit / shred {audit['vs_shred']:.2f}x ({audit['vs_shred_cpu']:.2f}x CPU),"
            f" / shred with events {audit['vs_shred_events']:.2f}x,"
            f" / scan {audit['vs_parse']:.2f}x ({audit['vs_parse_cpu']:.2f}x CPU)"
        )
        lines.append(f"  {_least_cpu(m)}")
    return "\n".join(lines)


def _least_cpu(m: dict[str, Any]) -> str:
    """The least CPU seconds of each side over the rounds, and the audits' ratios to the
    shred's: on a loaded machine the run that was fastest on the clock is not always the
    one that took least CPU, and CPU is what the load does not inflate."""
    least = {
        name: min(r["cpu_seconds"] for r in runs if "cpu_seconds" in r)
        for name, runs in m["runs"].items()
        if any("cpu_seconds" in r for r in runs)
    }
    shred = least.get("shred")
    parts = [f"{name} {cpu:.1f}" for name, cpu in least.items()]
    ratios = [
        f"{name} / shred {least[name] / shred:.2f}x"
        for name in ("audit", "before")
        if name in least and shred
    ]
    return "least CPU s: " + ", ".join(parts) + ("; " + ", ".join(ratios) if ratios else "")


def _failed(error: str) -> str:
    return "skipped" if error == "skipped" else f"failed: {error}"


def _times(ratio: float) -> str:
    return "not measured" if ratio != ratio else f"{ratio:.1f}x"  # NaN: a side was skipped


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    parser.add_argument("--spans", type=int, default=1_000_000)
    parser.add_argument("--big", type=int, default=0, help="also audit this many spans (zstd)")
    parser.add_argument("--dir", type=Path, default=Path("/tmp/handoffscope-bench"))
    parser.add_argument("--write", type=Path, help="write the Markdown report here")
    parser.add_argument("--skip-python", action="store_true", help="skip the slow baseline")
    parser.add_argument(
        "--json-only", action="store_true", help="measure only the shred and the JSON audit"
    )
    parser.add_argument(
        "--json-before", type=Path, help="with --json-only: a checkout of another version"
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="run the shred, parse and audits this many times each and keep the best of each",
    )
    parser.add_argument(
        "--files",
        type=int,
        default=1,
        help="with --json-only: the same spans split into this many files, as a rotating"
        " exporter writes them (the shred and the audit read them all)",
    )
    parser.add_argument(
        "--frameworks",
        type=int,
        default=0,
        help="with --json-only: also measure this many spans of other frameworks' shape"
        " (bench/framework_corpus.py: the recorded fixtures copied with fresh ids)",
    )
    parser.add_argument("--store", type=Path, help="the store to audit (default: compact one)")
    parser.add_argument("--store-only", action="store_true", help="measure only the store")
    parser.add_argument("--before", type=Path, help="a checkout of another version to compare")
    parser.add_argument("--before-python", default=sys.executable, help="its interpreter")
    parser.add_argument("--before-store", type=Path, help="a store its own compact wrote")
    args = parser.parse_args(argv)
    if args.child:
        child_main(args.child[0], args.child[1:])
        return 0
    command = "python bench/bench_audit.py " + " ".join(argv or sys.argv[1:])
    compiled(ROOT, args.before, args.json_before)
    if args.store_only:
        stores = measure_stores(args, args.store)
        print(json.dumps(stores, indent=2))
        if args.write:
            args.write.write_text(store_report(stores, command), encoding="utf-8")
        return 0
    path = args.dir / f"{args.spans}.jsonl"
    info = ensure(path, args.spans)
    if args.json_only:
        source = rotated(path, args.files) if args.files > 1 else path
        corpora = {"own": (info, source)}
        if args.frameworks:
            from bench.framework_corpus import generate as generate_frameworks

            other = args.dir / f"frameworks-{args.frameworks}.jsonl"
            made = (
                {"file": str(other), "bytes": other.stat().st_size, "reused": True}
                if other.exists()
                else generate_frameworks(other, spans=args.frameworks)
            )
            corpora["frameworks"] = (made, other)
        measured = {
            name: {"file": made, **measure_json(source, args.json_before, args.repeat)}
            for name, (made, source) in corpora.items()
        }
        print(json.dumps(measured, indent=2))
        print(json_summary(measured, os.getloadavg()), file=sys.stderr)
        return 0
    load = os.getloadavg()[0]
    machine = (
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}, load average {load:.1f} at start"
    )
    m: dict[str, Any] = {"file": info}
    m["shred"] = best(args.repeat, "shred", str(path))
    m["parse"] = best(args.repeat, "parse", str(path))
    m["audit"] = best(args.repeat, "audit", str(path))
    m["file"]["spans"] = m["audit"].get("spans")
    m["python"] = {"error": "skipped"} if args.skip_python else measure("python", str(path))
    store = args.dir / f"{args.spans}.parquet"
    m["compact"] = measure("compact", str(path), str(store))
    m["parquet"] = best(args.repeat, "audit", str(store))
    m["stores"] = measure_stores(args, store)
    figures: dict[str, Any] = {"machine": machine, "1m": m}
    if args.big:
        big = args.dir / f"{args.big}.jsonl.zst"
        big_info = ensure(big, args.big)
        figures["10m"] = {"file": big_info, "audit": measure("audit", str(big))}
        figures["10m"]["spans"] = figures["10m"]["audit"].get("spans")

    def ratio(a: dict[str, Any], b: dict[str, Any], key: str = "seconds") -> float:
        return a[key] / b[key] if key in a and key in b else float("nan")

    figures["ratios"] = {
        "audit_vs_shred": ratio(m["audit"], m["shred"]),
        "audit_vs_shred_cpu": ratio(m["audit"], m["shred"], "cpu_seconds"),
        "audit_vs_parse": ratio(m["audit"], m["parse"]),
        "python_vs_audit": ratio(m["python"], m["audit"]),
        "audit_vs_parse_cpu": ratio(m["audit"], m["parse"], "cpu_seconds"),
    }
    print(json.dumps(figures, indent=2))
    if args.write:
        args.write.parent.mkdir(parents=True, exist_ok=True)
        text = report(figures, command) + "\n" + store_report(m["stores"], command)
        args.write.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
