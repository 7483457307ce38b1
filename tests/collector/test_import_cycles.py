"""No import circle in the library, the auditor or the dashboard, even one closed inside
a function."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.import_cycles import cycles, graph
from tests.support.paths import REPO


@pytest.mark.parametrize("package", ["collector", "auditor", "dashboard"])
def test_no_module_imports_itself_round_a_circle(package: str) -> None:
    assert cycles(graph(REPO, package)) == []


def _package(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / "pkg" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_a_circle_closed_inside_a_function_is_found(tmp_path: Path) -> None:
    root = _package(
        tmp_path,
        {
            "__init__.py": "",
            "low.py": "def late():\n    from pkg.high import thing\n    return thing\n",
            "high.py": "from pkg import low\nthing = 1\n",
        },
    )
    assert cycles(graph(root, "pkg")) == [["pkg.high", "pkg.low"]]


def test_relative_imports_and_submodules_are_followed(tmp_path: Path) -> None:
    root = _package(
        tmp_path,
        {
            "__init__.py": "",
            "sub/__init__.py": "",
            "sub/a.py": "from ..b import x\n",
            "b.py": "from pkg.sub import a\nx = 1\n",
        },
    )
    assert cycles(graph(root, "pkg")) == [["pkg.b", "pkg.sub.a"]]


def test_imports_for_type_checking_only_make_no_circle(tmp_path: Path) -> None:
    root = _package(
        tmp_path,
        {
            "__init__.py": "",
            "low.py": (
                "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import high\n"
            ),
            "high.py": "from pkg import low\n",
        },
    )
    assert cycles(graph(root, "pkg")) == []
