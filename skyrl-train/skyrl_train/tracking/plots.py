"""Draw one `PlotSpec` of a run to a PNG (matplotlib's Agg canvas; no display, no global pyplot state)."""

from __future__ import annotations

from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from skyrl_train.tracking.metric_keys import PlotSpec
from skyrl_train.tracking.metrics_file import MetricsHistory

_MARKERS_UP_TO = 40  # points per line; above this, markers only clutter


def draw_plot(spec: PlotSpec, history: MetricsHistory, keys: list[str], path: Path) -> None:
    """One line per key against the training step; NaN values leave gaps."""
    fig = Figure(figsize=(9, 4.8), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    for key in keys:
        steps, values = history.series(key)
        marker = "o" if len(steps) <= _MARKERS_UP_TO else None
        ax.plot(steps, values, marker=marker, markersize=3.5, linewidth=1.5, label=key)
    ax.set_title(spec.title)
    ax.set_xlabel("step")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel(spec.ylabel)
    ax.grid(alpha=0.3)
    if len(keys) > 8:
        ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0), ncols=1 + len(keys) // 16)
    else:
        ax.legend(fontsize="small")
    fig.savefig(path)
