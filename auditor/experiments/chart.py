"""The chart of ``docs/experiments.md``: a Plotly figure, rendered to PNG by headless Chromium.

``success_figure(cells)`` builds the figure (pure: testable without a browser).
``write_png(figure, path)`` renders it: the figure is written as a self-contained HTML page
(plotly.js inline, nothing fetched) and Debian's ``chromium`` takes a headless screenshot of
it. Kaleido, Plotly's own exporter, would download a browser of its own; Chromium from the
distribution needs no download (``apt-get install chromium``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Final

from auditor.experiments.plan import PROTOCOLS, RELIABILITIES
from collector.errors import ConfigurationError

if TYPE_CHECKING:
    import plotly.graph_objects as go

    from auditor.experiments.analysis import LengthCell

__all__ = ["CHROMIUM_NAMES", "find_chromium", "success_figure", "write_png"]

CHROMIUM_NAMES: Final = ("chromium", "chromium-browser", "google-chrome", "chrome")
"""Browser executables tried, in order, on ``PATH``."""
WIDTH: Final = 1500
HEIGHT: Final = 620
_COLOURS: Final = {
    "fire-and-forget-k1": "#d62728",
    "two-step-k3": "#ff7f0e",
    "handshake-k1": "#9467bd",
    "handshake-k2": "#1f77b4",
    "handshake-k3": "#2ca02c",
}


def success_figure(cells: list[LengthCell]) -> go.Figure:
    """End-to-end success vs chain length: one panel per reliability, one line per protocol.

    Markers are measured values with their interval as error bars; dashed lines are the
    analytic values.
    """
    import plotly.graph_objects as go  # optional: the [dashboard] extra
    from plotly.subplots import make_subplots  # optional: the [dashboard] extra

    reliabilities = [r for r in RELIABILITIES if any(c.reliability == r for c in cells)]
    fig = make_subplots(
        rows=1,
        cols=max(1, len(reliabilities)),
        shared_yaxes=True,
        horizontal_spacing=0.03,
        subplot_titles=[f"{round(r * 100)}% per agent" for r in reliabilities],
    )
    # Protocols sit side by side around each chain length so their bars do not overlap.
    offsets = {p.key: (i - (len(PROTOCOLS) - 1) / 2) * 0.12 for i, p in enumerate(PROTOCOLS)}
    for col, r in enumerate(reliabilities, start=1):
        for p in PROTOCOLS:
            line = sorted(
                (c for c in cells if c.reliability == r and c.protocol == p),
                key=lambda c: c.agents,
            )
            if not line:
                continue
            colour = _COLOURS.get(p.key, "#444444")
            x = [c.agents + offsets[p.key] for c in line]
            y = [100 * c.success.value for c in line]
            up = [
                100 * (c.success.interval.high - c.success.value) if c.success.interval else 0
                for c in line
            ]
            down = [
                100 * (c.success.value - c.success.interval.low) if c.success.interval else 0
                for c in line
            ]
            fig.add_trace(
                go.Scatter(
                    x=x,
                    y=y,
                    mode="lines+markers",
                    name=p.label,
                    legendgroup=p.key,
                    showlegend=col == 1,
                    line={"color": colour, "width": 2},
                    marker={"size": 6},
                    error_y={"type": "data", "array": up, "arrayminus": down, "thickness": 1},
                ),
                row=1,
                col=col,
            )
            fig.add_trace(
                go.Scatter(
                    x=[c.agents for c in line],
                    y=[100 * (c.success.analytic or 0) for c in line],
                    mode="lines",
                    name=f"{p.label} (analytic)",
                    legendgroup=p.key,
                    showlegend=False,
                    line={"color": colour, "width": 1, "dash": "dash"},
                    hoverinfo="skip",
                ),
                row=1,
                col=col,
            )
        fig.update_xaxes(title_text="agents in the chain", dtick=1, row=1, col=col)
    fig.update_yaxes(title_text="end-to-end success (%)", range=[0, 102], row=1, col=1)
    fig.update_layout(
        title={
            "text": "End-to-end success vs chain length, measured from traces "
            "(bars: 95% intervals; dashed: analytic)",
            "x": 0.5,
        },
        template="plotly_white",
        width=WIDTH,
        height=HEIGHT,
        legend={"orientation": "h", "yanchor": "top", "y": -0.14, "x": 0.5, "xanchor": "center"},
        margin={"l": 70, "r": 30, "t": 80, "b": 110},
    )
    return fig


def find_chromium() -> str:
    """The path of a Chromium executable, or a ``ConfigurationError`` saying how to get one."""
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    raise ConfigurationError(
        "rendering the chart needs Chromium: apt-get install -y chromium "
        "(or run `handoffscope experiment --no-chart`)"
    )


def write_png(
    figure: go.Figure,
    path: str | os.PathLike[str],
    *,
    chromium: str | None = None,
    timeout_s: float = 60.0,
    attempts: int = 2,
) -> Path:
    """Render ``figure`` to the PNG file ``path`` with headless Chromium; returns the path.

    A Chromium that has not written the page in ``timeout_s`` is stopped and started again,
    up to ``attempts`` times (headless Chromium now and then never leaves its start-up)."""
    browser = chromium or find_chromium()
    target = Path(path).resolve()
    target.parent.mkdir(parents=True, exist_ok=True)
    width = int(figure.layout.width or WIDTH)
    height = int(figure.layout.height or HEIGHT)
    with tempfile.TemporaryDirectory(prefix="handoffscope-chart-") as tmp:
        page = Path(tmp) / "chart.html"
        figure.write_html(page, include_plotlyjs=True, full_html=True, config={"staticPlot": True})
        shot = Path(tmp) / "chart.png"
        command = [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--hide-scrollbars",
            "--no-first-run",
            # Nothing but the local page: an offline host refuses or never answers Chromium's
            # own connections, and a fetch left pending holds the virtual time budget below.
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={Path(tmp) / 'profile'}",
            f"--window-size={width},{height}",
            "--virtual-time-budget=10000",
            f"--screenshot={shot}",
            page.as_uri(),
        ]
        for attempt in range(1, attempts + 1):
            try:
                done = subprocess.run(
                    command, capture_output=True, text=True, timeout=timeout_s, check=False
                )
                break
            except subprocess.TimeoutExpired as e:
                if attempt == attempts:
                    raise ConfigurationError(
                        f"Chromium could not render the chart: {e} ({attempts} attempts)"
                    ) from e
            except OSError as e:
                raise ConfigurationError(f"Chromium could not render the chart: {e}") from e
        if done.returncode != 0 or not shot.exists() or shot.stat().st_size == 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
            raise ConfigurationError(
                "Chromium could not render the chart (exit code "
                f"{done.returncode}): {' / '.join(tail) or 'no output'}"
            )
        shutil.move(str(shot), target)
    return target
