"""The layout of docs/architecture.md, checked: the import direction (the import-linter
contracts in pyproject.toml), no reach into another module's private names, and no read of a
``HANDOFFSCOPE_*`` environment variable outside its registry.

Each check also runs against code broken on purpose (a backwards import in a copy of the
packages, a private reach and an environment read in a scratch module), so a check that
could no longer fail would be seen to."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from collector import environment_variables as ev
from tests.support.paths import REPO

PACKAGES = ("collector", "auditor", "dashboard")
REGISTRY = REPO / "collector" / "environment_variables.py"


def _lint(root: Path) -> subprocess.CompletedProcess[str]:
    """Run lint-imports with the contracts of ``root``'s pyproject.toml over ``root``'s
    packages (found before any installed copy)."""
    path = os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])
    env = dict(os.environ, PYTHONPATH=path)
    code = "import sys; from importlinter.cli import lint_imports_command as c; sys.exit(c())"
    return subprocess.run(
        [sys.executable, "-c", code, "--no-cache", "--no-logo"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_import_contracts_are_kept() -> None:
    done = _lint(REPO)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


@pytest.fixture(scope="module")
def copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The three packages and pyproject.toml, copied to a folder of their own."""
    root = tmp_path_factory.mktemp("layers")
    for package in PACKAGES:
        shutil.copytree(
            REPO / package, root / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    shutil.copy(REPO / "pyproject.toml", root / "pyproject.toml")
    return root


@pytest.mark.parametrize(
    ("module", "line", "contract"),
    [
        # The bottom of the auditor reaching up to the audit that composes it.
        ("auditor/database/statements.py", "from auditor.audit import audit", "auditor"),
        # Loading reaching into the reports, two layers up; an import inside a function
        # counts as much as one at the top.
        (
            "auditor/loading/load.py",
            "def _reach() -> None:\n    from auditor.report import render  # noqa",
            "auditor",
        ),
        # The library reaching into the auditor.
        ("collector/schema.py", "import auditor.rules", "parts"),
        # A pure data function of the dashboard importing Streamlit.
        ("dashboard/selection.py", "import streamlit", "pure-data"),
    ],
)
def test_a_backwards_import_breaks_a_contract(
    copy: Path, module: str, line: str, contract: str
) -> None:
    target = copy / module
    original = target.read_text(encoding="utf-8")
    target.write_text(original + "\n\n" + line + "\n", encoding="utf-8")
    try:
        done = _lint(copy)
    finally:
        target.write_text(original, encoding="utf-8")
    assert done.returncode != 0, done.stdout
    assert "BROKEN" in done.stdout
    dotted = module.removesuffix(".py").replace("/", ".")
    assert dotted in done.stdout, done.stdout


def test_the_copy_keeps_the_contracts_when_unbroken(copy: Path) -> None:
    """The copy the backwards imports go into passes as it is: what breaks is the import."""
    done = _lint(copy)
    assert done.returncode == 0, done.stdout + done.stderr


def _modules() -> Iterator[tuple[str, Path]]:
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            parts = list(path.relative_to(REPO).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            yield ".".join(parts), path


MODULES = dict(_modules())


def _private_reaches(name: str, source: str) -> list[str]:
    """Where module ``name`` (whose text is ``source``) uses another module's ``_name``:
    ``from m import _name``, or ``m._name`` on a module it imported."""
    tree = ast.parse(source)
    package = name if name in MODULES and MODULES[name].name == "__init__.py" else name
    found = []
    bound: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                if MODULES.get(name, Path()).name != "__init__.py":
                    parts = parts[:-1]
                parts = parts[: len(parts) - node.level + 1]
                base = ".".join([*parts, *([node.module] if node.module else [])])
            if base.split(".")[0] not in PACKAGES:
                continue
            for alias in node.names:
                full = f"{base}.{alias.name}"
                if full in MODULES:
                    bound[alias.asname or alias.name] = full
                elif _private(alias.name) and base != name:
                    found.append(f"line {node.lineno}: from {base} import {alias.name}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in PACKAGES:
                    bound[alias.asname or alias.name] = alias.name
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            owner = ast.unparse(node.value)
            target = bound.get(owner, owner if owner in MODULES else None)
            if target is not None and target != name:
                found.append(f"line {node.lineno}: {target}.{node.attr}")
    return found


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_module_uses_another_modules_private_names(name: str) -> None:
    found = _private_reaches(name, MODULES[name].read_text(encoding="utf-8"))
    assert not found, f"{name} uses private names of other modules: {found}"


def test_a_private_reach_is_found() -> None:
    reach = (
        "from auditor.audit import _IN_FINDING_ORDER\n"
        "from auditor.loading import load\n"
        "load._shown('x')\n"
    )
    assert _private_reaches("auditor.scratch", reach) == [
        "line 1: from auditor.audit import _IN_FINDING_ORDER",
        "line 3: auditor.loading.load._shown",
    ]
    # Its own private names, and a module's dunders, are its business.
    assert _private_reaches("auditor.audit", "from auditor.audit import _IN_FINDING_ORDER") == []
    assert _private_reaches("auditor.scratch", "import collector\ncollector.__version__") == []


def _environment_reads(source: str) -> list[str]:
    """Reads of a ``HANDOFFSCOPE_*`` variable from the environment in ``source``:
    ``os.environ[...]``, ``os.environ.get(...)``, ``os.getenv(...)`` (or an ``environ`` /
    ``env`` mapping) naming one by its text or by a registry constant."""
    tree = ast.parse(source)
    found = []

    def ours(node: ast.AST) -> bool:
        for sub in ast.walk(node):
            if isinstance(sub, ast.Constant) and str(sub.value).startswith("HANDOFFSCOPE_"):
                return True
            if isinstance(sub, (ast.Name, ast.Attribute)):
                text = ast.unparse(sub)
                if text.rsplit(".", 1)[-1].startswith("HANDOFFSCOPE_"):
                    return True
        return False

    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = ast.unparse(node.func)
            reads = func.endswith(("environ.get", "getenv", "env.get", "environ.pop"))
            if reads and any(ours(a) for a in node.args):
                found.append(f"line {node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
            if ast.unparse(node.value).endswith("environ") and ours(node.slice):
                found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


@pytest.mark.parametrize("name", sorted(n for n, p in MODULES.items() if p != REGISTRY))
def test_environment_variables_are_read_through_the_registry(name: str) -> None:
    found = _environment_reads(MODULES[name].read_text(encoding="utf-8"))
    assert not found, f"{name} reads the environment itself (use {ev.__name__}.read): {found}"


def test_an_environment_read_is_found() -> None:
    source = (
        "import os\n"
        "from collector import environment_variables as ev\n"
        "a = os.environ.get('HANDOFFSCOPE_MEMORY_LIMIT')\n"
        "b = os.environ[ev.HANDOFFSCOPE_TOKEN]\n"
        "c = os.getenv('HANDOFFSCOPE_RULES', '')\n"
        "d = os.environ.get('TERM')\n"
        "e = ev.read(ev.HANDOFFSCOPE_RULES)\n"
    )
    assert [f.split(":")[0] for f in _environment_reads(source)] == ["line 3", "line 4", "line 5"]


def test_the_registry_names_and_documents_every_variable() -> None:
    tree = ast.parse(REGISTRY.read_text(encoding="utf-8"))
    documented = {}
    body = tree.body
    for node, after in zip(body, [*body[1:], None], strict=True):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            name = node.target.id
            if name.startswith("HANDOFFSCOPE_"):
                assert isinstance(node.value, ast.Constant) and node.value.value == name
                doc = after.value.value if isinstance(after, ast.Expr) else None
                assert isinstance(doc, str) and doc.strip(), f"{name} has no docstring"
                documented[name] = doc
    assert tuple(sorted(documented)) == ev.ALL
    assert set(ev.ALL) <= set(ev.__all__)
    # Every variable the code names is in the registry (a prefix, ending in "_", names some).
    unknown = set()
    for path in MODULES.values():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            text = node.value if isinstance(node, ast.Constant) else None
            if isinstance(text, str) and text.startswith("HANDOFFSCOPE_") and text.isupper():
                if not any(v == text or text.endswith("_") and v.startswith(text) for v in ev.ALL):
                    unknown.add(text)
    assert not unknown, f"not in {ev.__name__}: {unknown}"


def test_the_registry_reads_only_its_own_names() -> None:
    assert ev.read(ev.HANDOFFSCOPE_MEMORY_LIMIT, {"HANDOFFSCOPE_MEMORY_LIMIT": "2GB"}) == "2GB"
    assert ev.read(ev.HANDOFFSCOPE_MEMORY_LIMIT, {}) is None
    with pytest.raises(KeyError, match="HANDOFFSCOPE_MEMORY_LIMT"):
        ev.read("HANDOFFSCOPE_MEMORY_LIMT", {})
