"""What a fresh interpreter loads: the import-hygiene checks of every package."""

from __future__ import annotations

import json
import subprocess
import sys


def loaded_after(imports: str) -> list[str]:
    """The modules a fresh interpreter holds after ``import <imports>``."""
    code = f"import sys, json, {imports}; print(json.dumps(sorted(m for m in sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded: list[str] = json.loads(out.stdout)
    return loaded


def within(loaded: list[str], packages: list[str]) -> list[str]:
    """Those of ``loaded`` that are ``packages`` or lie inside one."""
    return [m for m in loaded if any(m == p or m.startswith(p + ".") for p in packages)]
