"""``handoffscope audit`` and ``handoffscope compact``: the command-line edge of the auditor.

Results go to stdout, diagnostics (input problems, progress) to stderr. Exit codes: 0 when
no finding reaches ``--fail-on``, 1 when one does, 2 for unusable input or a usage error
(an output that cannot be written included), 130 when interrupted (see ``auditor.cli``).
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import BinaryIO

import click

from auditor.audit import audit as run_audit
from auditor.audit import audit_ahead as keep_report_ahead
from auditor.audit import prepare
from auditor.errors import AuditError, interrupted
from auditor.loading.load import load_traces
from auditor.model.prices import read_prices
from auditor.report import FORMATS, render, render_chunks
from auditor.rules import all_rules, get_rule, select_rules
from auditor.settings import FAIL_ON, AuditSettings, find_pyproject, resolve
from auditor.stores import kept
from auditor.stores.appended import append as append_segment
from auditor.stores.compact import check_target, is_single_file, write_parquet
from auditor.stores.saved import save
from collector.errors import HandoffscopeError
from collector.progress import progress, step

__all__ = ["audit", "compact"]

MAX_PROBLEMS_SHOWN = 20
_CHUNK = 1 << 20


def _report_problems(problems: list, *, quiet: bool, rest: str) -> None:
    """List input problems on stderr; ``rest`` says what happens to everything else."""
    if quiet or not problems:
        return
    click.echo(f"handoffscope: {len(problems)} input problem(s); {rest}:", err=True)
    for p in problems[:MAX_PROBLEMS_SHOWN]:
        click.echo(f"  {p}", err=True)
    if len(problems) > MAX_PROBLEMS_SHOWN:
        click.echo(
            f"  ... and {len(problems) - MAX_PROBLEMS_SHOWN} more (--format json lists them)",
            err=True,
        )


def _rule_list() -> str:
    return ", ".join(r.id for r in all_rules())


@click.command(
    epilog="Settings can also come from environment variables (HANDOFFSCOPE_VALIDATION_TIMEOUT, "
    "HANDOFFSCOPE_P95_BUDGET, HANDOFFSCOPE_MAX_ATTEMPTS, HANDOFFSCOPE_FAIL_ON, "
    "HANDOFFSCOPE_RULES, HANDOFFSCOPE_SKIP) or a [tool.handoffscope] table in pyproject.toml; "
    "an option beats a variable, which beats the file. Rules are described in docs/rules.md."
)
@click.argument("paths", nargs=-1, required=True, metavar="PATH...")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMATS),
    default="table",
    show_default=True,
    help="table: a readable report; json: the documented schema; markdown: a pull-request "
    "comment; junit: one test case per rule for CI.",
)
@click.option(
    "--fail-on",
    type=click.Choice(FAIL_ON),
    default=None,
    help="Exit 1 when a finding has at least this severity (default: error; never: always 0).",
)
@click.option(
    "--rule", "rules", multiple=True, metavar="ID", help="Run only this rule (repeatable)."
)
@click.option(
    "--skip", "skip", multiple=True, metavar="ID", help="Do not run this rule (repeatable)."
)
@click.option(
    "--validation-timeout",
    metavar="DURATION",
    default=None,
    help="A validation answer slower than this is late (default 2s).",
)
@click.option(
    "--p95-budget",
    metavar="DURATION",
    default=None,
    help="Budget for each receiver's p95 validation latency (default 500ms).",
)
@click.option(
    "--max-attempts",
    type=int,
    default=None,
    metavar="N",
    help="Retry cap assumed where a span does not record one (default 3).",
)
@click.option(
    "--prices",
    metavar="FILE",
    default=None,
    help='A TOML file of model prices ([models] "gpt-4o" = [2.50, 10.00], US dollars per '
    "million input and output tokens) for tokens reported without a cost; it overrides the "
    "built-in table, and such costs are marked estimated.",
)
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False, writable=True),
    default=None,
    help="Write the report to this file instead of stdout.",
)
@click.option(
    "--color/--no-color",
    default=None,
    help="Colour the table report (default: when stdout is a terminal).",
)
@click.option(
    "--width",
    type=click.IntRange(60, 400),
    default=None,
    help="Width of the table report (default: the terminal's, or 100).",
)
@click.option("--quiet", "-q", is_flag=True, help="Do not list input problems on stderr.")
@click.option(
    "--explain",
    is_flag=True,
    help="List, per trace of other frameworks' spans, the agents found and what named each,"
    " the edges and their evidence, and the spans whose tokens no agent could be charged with.",
)
@click.option(
    "--table",
    metavar="NAME",
    default=None,
    help="ClickHouse sources: the traces table (default otel_traces, the exporter's).",
)
@click.option(
    "--since",
    metavar="TIME",
    default=None,
    help="ClickHouse sources: spans starting at or after TIME (ISO 8601, or 24h back).",
)
@click.option(
    "--until",
    metavar="TIME",
    default=None,
    help="ClickHouse sources: spans starting before TIME (ISO 8601, or 1h back).",
)
@click.option(
    "--list-rules",
    is_flag=True,
    is_eager=True,
    expose_value=False,
    callback=lambda ctx, _p, v: _list_rules(ctx) if v else None,
    help="List the rules and exit.",
)
def audit(
    paths: tuple[str, ...],
    fmt: str,
    fail_on: str | None,
    rules: tuple[str, ...],
    skip: tuple[str, ...],
    validation_timeout: str | None,
    p95_budget: str | None,
    max_attempts: int | None,
    prices: str | None,
    output: str | None,
    color: bool | None,
    width: int | None,
    quiet: bool,
    explain: bool,
    table: str | None,
    since: str | None,
    until: str | None,
) -> int:
    """Audit trace files for handshake violations, spend and reliability.

    PATH can be a trace file, a directory (read recursively) or a glob, holding OTLP JSON
    (JSON-lines or documents, optionally .gz/.zst) or Parquet made by `handoffscope compact`.
    It can also be the Collector's ClickHouse table, audited inside ClickHouse:
    clickhouse://HOST:PORT/DATABASE (user and password from HANDOFFSCOPE_CLICKHOUSE_USER
    and HANDOFFSCOPE_CLICKHOUSE_PASSWORD) or chdb://PATH (an embedded data directory).

    \b
    Examples:
      handoffscope audit sample_traces/
      handoffscope audit 'traces/*.jsonl.gz' --format markdown --fail-on warning
      handoffscope audit store.parquet --rule slow-validation --p95-budget 300ms
      handoffscope audit clickhouse://localhost:8123/otel --since 24h
    """
    settings = resolve(
        {
            "validation_timeout": validation_timeout,
            "p95_budget": p95_budget,
            "max_attempts": max_attempts,
            "fail_on": fail_on,
            "rules": rules,
            "skip": skip,
            "prices": prices,
        },
        pyproject=find_pyproject(),
    )
    _check_rules(settings)  # unknown ids fail before any reading
    if settings.prices is not None:
        read_prices(settings.prices)  # a bad prices file fails before any reading too
    to_terminal = output is None and sys.stdout.isatty()
    if width is None:
        width = shutil.get_terminal_size().columns if to_terminal else 100
    width = max(60, width)
    color = to_terminal if color is None else color
    kept_at = None
    if any(p.startswith(("chdb://", "clickhouse://", "clickhouses://")) for p in paths):
        try:
            from auditor.clickhouse.command import audit_source  # optional: the [clickhouse] extra
        except ModuleNotFoundError as e:
            raise click.ClickException(
                f"auditing ClickHouse needs {e.name}: pip install 'handoffscope[clickhouse]'"
            ) from e
        with progress("auditing inside ClickHouse"):
            result = audit_source(paths, settings, table=table, since=since, until=until)
    else:
        if table or since or until:
            raise click.UsageError("--table, --since and --until apply to ClickHouse sources")
        _refuse_stdin(paths)
        _refuse_input_as_output(output, paths)  # a file named on the command line: at once
        # A compacted store audited before with the same settings and code: its kept report.
        files = kept.store_files(paths)
        _refuse_input_as_output(output, files or ())
        kept_at = None if files is None else kept.slot(files, settings, fmt, width, color)
        found = None if kept_at is None or explain else kept.open_report(kept_at)
        if found is not None:
            with found[0] as report:
                _emit(report, output=output, fmt=fmt)
            return found[1]
        with progress("loading traces"):
            traces = load_traces(paths)
        _refuse_input_as_output(output, traces.files)  # one found in a folder or by a glob
        _report_problems(traces.problems, quiet=quiet, rest="everything else was audited")
        with progress("auditing"):
            # The table and Markdown show a few findings: their parts need no JSON text.
            result = run_audit(traces, settings, store=files is not None, json_text=fmt == "json")
        if not quiet:
            # A file kept beside a store that could not be read: the report is whole, slower.
            for note in traces.notes:
                click.echo(f"handoffscope: {note}", err=True)
        # The report reads none of it: DuckDB's memory is free before rendering takes more.
        traces.con.close()
    result.explained = explain
    # The JSON report goes out as the bytes it is written as; the others as text, which click
    # writes for the terminal it finds.
    text: str | list[bytes | memoryview] = (
        render_chunks(result, fmt)
        if fmt == "json"
        else render(result, fmt, width=width, color=color)
    )
    _emit(text, output=output, fmt=fmt)
    # Kept only for the store audited: not one rewritten meanwhile (its key changed).
    if kept_at is not None and not result.problems and not explain:
        if kept.slot(result.files, settings, fmt, width, color) == kept_at:
            kept.keep(kept_at, text, result.exit_code())
    return result.exit_code()


def _emit(text: str | list[bytes | memoryview] | BinaryIO, *, output: str | None, fmt: str) -> None:
    """The report (text, its UTF-8 in chunks, or a kept report's file) to stdout, or to
    ``--output``."""
    if output is None:
        try:
            if isinstance(text, str):
                click.echo(text, nl=False)
            elif isinstance(text, list):
                sys.stdout.flush()
                sys.stdout.buffer.writelines(text)
                sys.stdout.buffer.flush()
            else:
                sys.stdout.flush()
                shutil.copyfileobj(text, sys.stdout.buffer, _CHUNK)
        except BrokenPipeError:
            raise  # the reader went away (`| head`): auditor.cli ends quietly
        except OSError as e:
            # A full disk under `> audit.json`: exit 2 naming the stream, not a traceback,
            # and not the findings' exit 1 for a report that was lost.
            raise AuditError(
                f"standard output: could not write the report ({e.strerror or e}); make room"
                " where it is redirected, or write it with -o FILE",
                title="write failed",
            ) from e
    else:
        _write_report(Path(output), text)
        click.echo(f"handoffscope: wrote the {fmt} report to {output}", err=True)


def _write_report(path: Path, text: str | list[bytes | memoryview] | BinaryIO) -> None:
    """Write the report, creating missing folders (as ``simulate --out`` does); a failure is
    an error naming the path (exit 2), never a traceback or exit 1, which CI reads as
    findings."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(text, str):
            path.write_text(text, encoding="utf-8")
        elif isinstance(text, list):
            with path.open("wb") as out:
                out.writelines(text)
        else:
            with path.open("wb") as out:
                shutil.copyfileobj(text, out, _CHUNK)
    except OSError as e:
        raise AuditError(
            f"{path}: could not write the report ({e.strerror or e}); choose another --output",
            title="write failed",
        ) from e


def _check_rules(settings: AuditSettings) -> None:
    """Check the rule ids chosen; an unknown one set by an environment variable or
    ``pyproject.toml`` is named with where it was set (an option names itself)."""
    for name in ("rules", "skip"):
        where = settings.sources.get(name, "option")
        for rule_id in getattr(settings, name):
            try:
                get_rule(rule_id)
            except AuditError as e:
                if where.startswith("option"):
                    raise
                raise AuditError(f"{where}: {e}", title=e.title) from e
    select_rules(settings.rules, settings.skip)


def _refuse_stdin(paths: Iterable[str]) -> None:
    """Raise :class:`AuditError` for ``-`` (standard input, by the usual convention) when no
    file has that name: traces are read from files, in parallel and more than once."""
    if "-" in paths and not os.path.exists("-"):
        raise AuditError(
            "-: traces are not read from standard input; save them to a file first"
            " (... > traces.jsonl, which may be .gz or .zst) and give its name",
            title="no trace data",
        )


def _refuse_input_as_output(output: str | None, inputs: Iterable[str]) -> None:
    """Raise :class:`AuditError` when ``--output`` names one of the trace files ``inputs``:
    the report would replace the traces it was made from."""
    if output is None or not os.path.isfile(output):
        return
    target = os.path.realpath(output)
    for source in inputs:
        if os.path.realpath(source) == target:
            raise AuditError(
                f"-o {output}: is a trace file this audit reads, which the report would"
                " replace; choose another --output",
                title="output is an input",
            )


def _list_rules(ctx: click.Context) -> None:
    for rule in all_rules():
        click.echo(f"{rule.id:34} {rule.severity:8} {rule.summary}")
    ctx.exit(0)


@click.command()
@click.argument("paths", nargs=-1, required=True, metavar="PATH...")
@click.option(
    "--out",
    "out",
    required=True,
    metavar="TARGET",
    help="Where to write: a name ending in .parquet is one file; any other name is a folder "
    "(created if missing) filled with Parquet files. It must not be, hold or lie inside an "
    "input.",
)
@click.option("--force", is_flag=True, help="Replace TARGET if it exists.")
@click.option(
    "--append",
    is_flag=True,
    help="Add the spans TARGET (a folder store) does not hold yet as one more file of it; "
    "its next audit reads only the new file and the traces it touches.",
)
@click.option("--quiet", "-q", is_flag=True, help="Do not list input problems on stderr.")
@click.option(
    "--audit/--no-audit",
    "audit_ahead",
    default=True,
    show_default=True,
    help="Also audit the store with the settings in force here and keep its JSON report "
    "beside it, so that `audit STORE --format json` answers at once (about one audit's time).",
)
def compact(
    paths: tuple[str, ...], out: str, force: bool, append: bool, quiet: bool, audit_ahead: bool
) -> int:
    """Turn trace files into Parquet for fast repeated audits.

    The Parquet holds the parsed, de-duplicated spans table; `handoffscope audit` reads it
    like any trace file, without parsing JSON again. The tables derived from the spans for
    the rules and figures are saved beside it (a hidden `.NAME.derived` folder), so an audit
    or the dashboard opens the store without deriving them. Each audit of the store keeps
    its report there too, starting with the JSON report `compact` makes with the settings in
    force here: the same audit again answers from it at once.

    \b
    Example:
      handoffscope compact sample_traces/ --out store.parquet
      handoffscope audit store.parquet
      handoffscope compact traces/ --out store/ && handoffscope compact new/ --out store/ --append
    """
    import duckdb  # imported on first use: `handoffscope --help` stays without DuckDB

    if append and force:
        raise click.UsageError("--append adds to TARGET; --force would replace it")
    if append and not is_single_file(out) and not Path(out).is_dir():
        # Said before reading: the store's own check would call a mistyped folder, or some
        # other file, a single .parquet file.
        raise AuditError(
            f"{out}: is a file, not a folder store; --append adds to a folder that"
            " `handoffscope compact TRACES --out FOLDER` made"
            if Path(out).exists()
            else f"{out}: no store there to append to; make it first with `handoffscope"
            f" compact TRACES --out {out}` (without --append), or check the folder's name",
            title="not a folder store",
        )
    _refuse_stdin(paths)
    check_target(out, paths)  # before reading: replacing an input would destroy it
    if force and not is_single_file(out) and Path(out).is_file():
        # --force replaces a store; a folder holding other files is refused, and so is this.
        raise AuditError(
            f"{out}: is a file, and a name not ending in .parquet makes a folder store; not"
            f" replacing it: choose another --out ({Path(out).stem}.parquet for one file)",
            title="output exists",
        )
    with progress("loading traces"):
        traces = load_traces(paths)
    _report_problems(traces.problems, quiet=quiet, rest="compacting everything else")
    if append:
        with progress("compacting"):
            step(f"appending the new of {traces.span_count:,} spans")
            notes: list[str] = []
            segment, count = append_segment(traces, out, notes)
        click.echo(
            f"handoffscope: appended {count:,} new spans to {out} as {segment}"
            if segment
            else f"handoffscope: {out} holds every span already; nothing appended",
            err=True,
        )
        for note in notes:
            click.echo(f"handoffscope: {note}", err=True)
        if not audit_ahead or segment is None:
            return 0
        traces.con.close()
        try:
            with progress("compacting"):
                step("auditing the store, to keep its JSON report")
                keep_report_ahead(out, resolve(pyproject=find_pyproject()))
        except (HandoffscopeError, OSError, duckdb.Error) as e:
            if interrupted(e):
                raise
            click.echo(f"handoffscope: no report kept beside {out} ({e})", err=True)
        return 0
    with progress("compacting"):
        step(f"writing {traces.span_count:,} spans to Parquet")
        written = write_parquet(traces, out, force=force)
    target = Path(out)
    if is_single_file(target):
        where = written[0]
    else:
        where = f"{len(written)} Parquet file(s) in the folder {target}{os.sep}"
        if target.suffix:
            # `--out x.txt` looks like a file name: say why it became a folder.
            where += f" (a name not ending in .parquet is a folder; use {target.stem}.parquet "
            where += "for one file)"
    click.echo(
        f"handoffscope: wrote {traces.span_count:,} spans from {len(traces.files)} files to "
        + where,
        err=True,
    )
    # The store is complete without them: whoever opens it then derives them itself.
    try:
        with progress("compacting"):
            step("saving the derived tables beside the store")
            prepare(traces.con)
            beside = save(traces.con, written)
    except (AuditError, OSError, duckdb.Error) as e:
        if interrupted(e):
            raise  # Ctrl-C is not a failure to save: the command line reports it (exit 130)
        click.echo(
            f"handoffscope: the derived tables were not saved beside {out} ({e}); "
            "the store is complete, and whoever opens it derives them",
            err=True,
        )
    else:
        click.echo(f"handoffscope: saved the derived tables in {beside}", err=True)
    if not audit_ahead:
        return 0
    traces.con.close()  # its spans are in the store now: free them before auditing it
    try:
        with progress("compacting"):
            step("auditing the store, to keep its JSON report")
            kept_at = keep_report_ahead(out, resolve(pyproject=find_pyproject()))
    except (HandoffscopeError, OSError, duckdb.Error) as e:
        if interrupted(e):
            raise
        click.echo(
            f"handoffscope: no report kept beside {out} ({e}); the store is complete, and "
            "its first audit runs the rules",
            err=True,
        )
    else:
        if kept_at is not None:
            click.echo(f"handoffscope: kept its JSON report in {kept_at.parent}", err=True)
    return 0
