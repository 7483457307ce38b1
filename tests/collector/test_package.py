"""The distribution's surface: console script, version, import hygiene, public names."""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import collector
from auditor.cli import main
from tests.support.imports import loaded_after, within
from tests.support.paths import REPO

ROOT = REPO
PACKAGES = ["collector", "auditor", "dashboard"]
HEAVY = ["duckdb", "streamlit", "plotly", "grpc", "opentelemetry.sdk", "pandas", "click"]
# Agent frameworks: only their own adapter module in collector.integrations imports one.
FRAMEWORKS = ["pydantic_ai", "agents", "openai", "langgraph", "langchain_core"]


def test_version_and_help(capsys):
    assert main(["--version"]) == 0
    assert collector.__version__ in capsys.readouterr().out
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "audit" in out and "Usage" in out


def test_unknown_command_is_a_usage_error(capsys):
    assert main(["no-such-command"]) == 2
    assert "No such command" in capsys.readouterr().err


def test_importing_collector_loads_nothing_heavy():
    assert within(loaded_after("collector"), HEAVY) == []


def test_importing_collector_and_its_integrations_loads_no_framework():
    loaded = loaded_after("collector, collector.integrations, collector.integrations.handshake")
    assert within(loaded, HEAVY + FRAMEWORKS) == []


def test_public_surface_is_sorted_and_importable():
    assert collector.__all__ == sorted(collector.__all__)
    for name in collector.__all__:
        assert hasattr(collector, name), name


def test_every_command_and_option_has_help_text():
    import click

    from auditor.cli import COMMANDS, cli

    ctx = click.Context(cli, info_name="handoffscope")
    assert sorted(cli.list_commands(ctx)) == sorted(COMMANDS)
    for name in COMMANDS:
        command = cli.get_command(ctx, name)
        assert command is not None, name
        assert (command.help or "").strip(), f"{name} has no help text"
        for param in command.params:
            if isinstance(param, click.Option) and not param.hidden:
                assert (param.help or "").strip(), f"{name} {param.opts} has no help text"


def test_the_packages_type_check(tmp_path: Path) -> None:
    """Every public name carries type hints; the checker holds them to the code."""
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path), *PACKAGES],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_code_passes_the_linter_and_the_formatter() -> None:
    for args in (["check", "--no-cache", "."], ["format", "--check", "--no-cache", "."]):
        done = subprocess.run(
            [sys.executable, "-m", "ruff", *args], cwd=ROOT, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stdout + done.stderr


HTTP_STACK = ["httpx", "starlette", "uvicorn", "jsonschema", "anyio", "h11"]


def test_importing_collector_loads_no_http_stack():
    assert within(loaded_after("collector"), HTTP_STACK) == []


def test_the_http_package_loads_neither_the_server_runner_nor_the_sdk():
    loaded = loaded_after("collector.http")
    assert "httpx" in loaded and "starlette" in loaded  # it is the HTTP package
    # click is left out: httpx itself imports its optional command line when click is there.
    banned = ["uvicorn", *(h for h in HEAVY if h != "click")]
    assert within(loaded, banned) == []


def test_the_auditor_loads_only_the_collector_modules_it_uses():
    # Every command imports the auditor; the handshake machinery (asyncio, the OpenTelemetry
    # API) is collector's, loaded when one of its names is first used.
    loaded = loaded_after("auditor.audit, auditor.commands, auditor.loading.load")
    assert within(loaded, ["asyncio", "opentelemetry"]) == []
    assert "collector.handoff" not in loaded


def test_a_public_name_is_its_modules_own_even_when_the_module_was_imported_first():
    code = (
        "import collector.workflow_run, collector.sender, json, sys;"
        " from collector import workflow, Sender;"
        " module = sys.modules['collector.workflow_run'];"
        " print(json.dumps([workflow is module.workflow, Sender is collector.sender.Sender,"
        " callable(workflow) and not isinstance(workflow, type(module))]))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == [True, True, True]


def test_no_submodule_is_named_like_a_public_name():
    # Importing a submodule sets the package's attribute of that name to the module, which
    # would then hide a public name spelled the same ("schema" is public as the module).
    submodules = {m.name for m in pkgutil.iter_modules(collector.__path__)}
    assert submodules & set(collector.__all__) == {"schema"}
