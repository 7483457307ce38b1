"""The ``handoffscope`` command line.

The root group only wires sub-commands together. Each sub-command lives in the module that
owns its job and is imported only when it is run, so ``handoffscope --help`` stays fast and a
missing optional dependency affects only the command that needs it.
"""

from __future__ import annotations

import errno
import importlib
import importlib.util
import os
import sys
from typing import Any

try:
    import click
except ImportError:  # pragma: no cover - exercised only without the [cli] extra
    click = None  # type: ignore[assignment]

from auditor.errors import first_line, interrupted
from collector import __version__
from collector import environment_variables as ev
from collector.errors import HandoffscopeError

INSTALL_HINT = "handoffscope: the command line needs its extra: pip install 'handoffscope[cli]'"

# name -> (module, attribute, one-line help shown in `handoffscope --help`)
COMMANDS: dict[str, tuple[str, str, str]] = {
    "audit": ("auditor.commands", "audit", "Audit trace files for handshake violations."),
    "compact": ("auditor.commands", "compact", "Turn trace files into Parquet for fast audits."),
    "clickhouse": (
        "auditor.clickhouse.command",
        "clickhouse",
        "ClickHouse helpers: the stored columns that make audits fast.",
    ),
    "simulate": (
        "collector.simulator.cli",
        "simulate",
        "Simulate multi-agent runs into trace files.",
    ),
    "collect": ("collector.receiver.cli", "collect", "Receive OTLP spans and write trace files."),
    "watch": ("auditor.watch", "watch", "Alert on validation latency as traces arrive."),
    "dashboard": ("dashboard.cli", "dashboard", "Open the dashboard over a trace set."),
    "experiment": (
        "auditor.experiments",
        "experiment",
        "Reproduce the protocol's reliability figures.",
    ),
    "serve": ("collector.http.cli", "serve", "Serve a handshake receiver over HTTP or A2A."),
    "conformance": (
        "collector.http.cli",
        "conformance",
        "Check a handshake receiver's endpoint against the protocol.",
    ),
    "store": ("collector.store_cli", "store", "List and resolve idempotency keys in doubt."),
}


if click is not None:

    class LazyGroup(click.Group):
        """A group whose sub-commands are imported on first use."""

        def list_commands(self, ctx: click.Context) -> list[str]:
            return sorted(name for name in COMMANDS if _available(name))

        def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
            if name not in COMMANDS:
                return None
            module_name, attr, _ = COMMANDS[name]
            try:
                module = importlib.import_module(module_name)
            except ModuleNotFoundError as e:
                missing = e.name or "a dependency"
                if missing.split(".")[0] in {"collector", "auditor", "dashboard"}:
                    return None
                raise click.ClickException(
                    f"'{name}' needs {missing}: pip install 'handoffscope[all]'"
                ) from e
            command: click.Command = getattr(module, attr)
            return command

        def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
            # Help text comes from the table above so `--help` imports no sub-command.
            rows = [(name, COMMANDS[name][2]) for name in self.list_commands(ctx)]
            if rows:
                with formatter.section("Commands"):
                    formatter.write_dl(rows)

        def invoke(self, ctx: click.Context) -> Any:
            try:
                return super().invoke(ctx)
            except Exception as e:
                if interrupted(e):
                    # Click turns KeyboardInterrupt into Abort, which main() reports as 130.
                    raise KeyboardInterrupt from e
                if isinstance(e, BrokenPipeError) and e.filename is None:
                    # The reader of stdout went away (`| head`): end quietly, as a process
                    # SIGPIPE stops would, not with Click's exit 1, which reads as findings.
                    _drop_stdout()
                    ctx.exit(EXIT_BROKEN_PIPE)
                if isinstance(e, OSError) and _lost_output(e):
                    click.echo(
                        f"handoffscope: could not write its output ({e.strerror});"
                        " make room where it goes, or send it elsewhere",
                        err=True,
                    )
                    _drop_stdout()
                    ctx.exit(2)
                if not isinstance(e, HandoffscopeError) and not (
                    out_of_memory(e) or unreadable_file(e)
                ):
                    raise
                click.echo(f"handoffscope: {_one_line(e)}", err=True)
                ctx.exit(2)

    def _available(name: str) -> bool:
        module_name = COMMANDS[name][0]
        return importlib.util.find_spec(module_name.rsplit(".", 1)[0]) is not None and (
            importlib.util.find_spec(module_name) is not None
        )

    @click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
    @click.version_option(__version__, "-V", "--version", prog_name="handoffscope")
    def cli() -> None:
        """handoffscope: validated, idempotent handoffs between AI agents.

        Instrument agents with the `collector` library, then audit the trace files they
        write. Start with:  handoffscope audit sample_traces/
        """


MEMORY_HINT = (
    f"Set {ev.HANDOFFSCOPE_MEMORY_LIMIT} (e.g. 4GB) to give large inputs more memory,"
    " or read fewer files at once."
)


def out_of_memory(error: BaseException) -> bool:
    """Whether ``error`` is DuckDB running out of memory: the user's to fix, so it is
    reported as one line with :data:`MEMORY_HINT`, never as a traceback."""
    duckdb = sys.modules.get("duckdb")  # never loaded: it raised nothing
    return duckdb is not None and isinstance(error, duckdb.OutOfMemoryException)


EXIT_BROKEN_PIPE = 141
"""The exit code when stdout's reader closed it early: 128 + SIGPIPE, as a shell reports a
process that signal stopped."""

# Errors only a write gives: an EIO may as well be a read of an input, which is no output.
_WRITE_ERRORS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


def _lost_output(error: OSError) -> bool:
    """Whether ``error`` is a write to an unnamed stream (stdout) that failed: a full disk
    under ``> report``, not a file the command opened (those name themselves)."""
    return error.filename is None and error.errno in _WRITE_ERRORS


def _drop_stdout() -> None:
    """Point stdout's descriptor at the null device, so that what it still buffers is
    dropped at exit instead of failing again with an "Exception ignored" note."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # a stream without a descriptor
        return
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, fd)
    finally:
        os.close(null)


FILE_HINT = (
    "A file it names may be damaged, cut short or out of reach: restore or remove it (a"
    " store can be written again with compact --force), then run the command again."
)


def unreadable_file(error: BaseException) -> bool:
    """Whether ``error`` is DuckDB failing on a file no reader caught (a Parquet file of a
    store cut short by a copy, say): one line naming the file, never a traceback."""
    duckdb = sys.modules.get("duckdb")  # never loaded: it raised nothing
    return duckdb is not None and isinstance(
        error, duckdb.InvalidInputException | duckdb.IOException
    )


def _one_line(error: BaseException) -> str:
    if out_of_memory(error):
        return f"{first_line(error)}. {MEMORY_HINT}"
    if unreadable_file(error):
        return f"{first_line(error)}. {FILE_HINT}"
    return str(error)


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit code (0 clean, 1 findings, 2 error, 130
    interrupted, 141 when stdout's reader closed it early)."""
    if click is None:
        print(INSTALL_HINT, file=sys.stderr)
        return 2
    try:
        result = cli.main(args=argv, prog_name="handoffscope", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("Aborted.", err=True)
        return 130
    except click.ClickException as e:
        e.show()
        return 2 if e.exit_code == 1 else e.exit_code
    except click.exceptions.Exit as e:
        return e.exit_code
    except HandoffscopeError as e:
        click.echo(f"handoffscope: {e}", err=True)
        return 2
    except KeyboardInterrupt:
        click.echo("Aborted.", err=True)
        return 130
    except Exception as e:
        # Outside a sub-command (or from Click itself): the same rule as in LazyGroup.invoke.
        if not interrupted(e):
            raise
        click.echo("Aborted.", err=True)
        return 130
    finally:
        _flush_stdout()
    return result if isinstance(result, int) else 0


def _flush_stdout() -> None:
    """Flush stdout now, while a failure can still be said in one line: a report whose
    write failed (exit 2 already says so) keeps its bytes buffered, and Python's own flush
    at exit would print a traceback-like note about them."""
    try:
        sys.stdout.flush()
    except (OSError, ValueError):
        _drop_stdout()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
