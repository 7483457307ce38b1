"""The experiment's chart rendered by the real headless Chromium, and what happens when that
Chromium hangs (a start-up that never ends cannot be made on demand: a script stands for it,
then hands over to the real browser)."""

from __future__ import annotations

import struct
from pathlib import Path

import plotly.graph_objects as go
import pytest

from auditor.experiments.chart import HEIGHT, WIDTH, find_chromium, write_png
from collector.errors import ConfigurationError


def _figure() -> go.Figure:
    figure = go.Figure(go.Scatter(x=[1, 2, 3, 4, 5], y=[0.95, 0.9, 0.86, 0.81, 0.77]))
    figure.update_layout(width=WIDTH, height=HEIGHT)
    return figure


def _hangs_first(tmp_path: Path, then: str) -> Path:
    """A Chromium whose first start never ends; later starts run ``then``."""
    script = tmp_path / "chromium"
    mark = tmp_path / "started"
    script.write_text(
        f'#!/bin/sh\nif [ ! -e "{mark}" ]; then touch "{mark}"; exec sleep 60; fi\n'
        f'exec "{then}" "$@"\n'
    )
    script.chmod(0o755)
    return script


def test_a_chromium_that_hangs_is_started_again(tmp_path: Path) -> None:
    browser = _hangs_first(tmp_path, find_chromium())
    png = write_png(_figure(), tmp_path / "chart.png", chromium=str(browser), timeout_s=15)
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">II", data[16:24]) == (WIDTH, HEIGHT)


def test_a_chromium_that_always_hangs_is_one_clear_error(tmp_path: Path) -> None:
    hangs = tmp_path / "chromium"
    hangs.write_text("#!/bin/sh\nexec sleep 60\n")
    hangs.chmod(0o755)
    with pytest.raises(ConfigurationError, match=r"could not render the chart.*2 attempts"):
        write_png(_figure(), tmp_path / "chart.png", chromium=str(hangs), timeout_s=1)
    assert not (tmp_path / "chart.png").exists()
