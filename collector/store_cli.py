"""``handoffscope store``: list and settle the keys of an idempotency store left in doubt.

A key is in doubt when its task may have run and no result is stored (its execution died or
stalled mid-task, or its result could not be written); the receiver answers ``CommitInDoubt``
for it and never runs it again on its own. An operator checks the task's effects, then::

    handoffscope store doubts --store ledger.db
    handoffscope store resolve KEY --store ledger.db --ran [--result JSON]
    handoffscope store resolve KEY --store ledger.db --not-ran
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import click

from collector.errors import ConfigurationError
from collector.sqlite_store import SQLiteStore

__all__ = ["store"]

_STORE_HELP = "The receiver's SQLite idempotency store (the file given to SQLiteStore)."


def _open(path: Path) -> SQLiteStore:
    if not path.is_file():
        raise ConfigurationError(f"no idempotency store at {path}; pass the receiver's file")
    return SQLiteStore(path)


@click.group()
def store() -> None:
    """Inspect and settle an idempotency store's keys in doubt."""


@store.command()
@click.option("--store", "path", type=click.Path(path_type=Path), required=True, help=_STORE_HELP)
@click.option("--receiver", default=None, help="Only this receiver's keys.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
def doubts(path: Path, receiver: str | None, as_json: bool) -> None:
    """List the keys in doubt (exit 1 when there are some, 0 when none)."""
    s = _open(path)
    try:
        found = s.in_doubt(receiver)
    finally:
        s.close()
    for d in found:
        if as_json:
            row = {"receiver": d.receiver, "key": d.key, "reason": d.reason, "owner": d.owner}
            click.echo(json.dumps(row, ensure_ascii=False))
        else:
            click.echo(f"{d.receiver}\t{d.key}\t{d.reason}")
    if not as_json:
        click.echo(f"{len(found)} key(s) in doubt in {path}", err=True)
    raise SystemExit(1 if found else 0)


@store.command()
@click.argument("key")
@click.option("--store", "path", type=click.Path(path_type=Path), required=True, help=_STORE_HELP)
@click.option(
    "--receiver",
    default=None,
    help="The receiver the key belongs to (needed only when several have it in doubt).",
)
@click.option(
    "--ran/--not-ran",
    "ran",
    default=None,
    help="--ran: the task ran; later commits replay --result. --not-ran: it did not; the next "
    "commit runs it.",
)
@click.option(
    "--result",
    "result_text",
    default=None,
    metavar="JSON",
    help="With --ran: the task's result as JSON, replayed to later commits (default null).",
)
def resolve(
    key: str, path: Path, receiver: str | None, ran: bool | None, result_text: str | None
) -> None:
    """Settle KEY, in doubt, as run (--ran) or not run (--not-ran)."""
    if ran is None:
        raise click.UsageError("say what happened: --ran or --not-ran")
    if result_text is not None and not ran:
        raise click.UsageError("--result goes with --ran")
    result: Any = None
    if result_text is not None:
        try:
            result = json.loads(result_text)
        except ValueError as e:
            raise click.BadParameter(f"not JSON ({e})", param_hint="--result") from e
    s = _open(path)
    try:
        if receiver is None:
            receivers = sorted({d.receiver for d in s.in_doubt() if d.key == key})
            if len(receivers) > 1:
                raise ConfigurationError(
                    f"key {key!r} is in doubt at receivers {', '.join(receivers)}; pass --receiver"
                )
            if not receivers:
                raise ConfigurationError(
                    f"key {key!r} is not in doubt in {path} (see `handoffscope store doubts`)"
                )
            receiver = receivers[0]
        settled = s.resolve(
            receiver, key, ran=ran, now_ms=time.time_ns() // 1_000_000, result=result
        )
    finally:
        s.close()
    said = "ran: later commits replay its result" if ran else "did not run: the next commit runs it"
    click.echo(f"{settled.receiver}\t{settled.key}\t{said} (was in doubt: {settled.reason})")
