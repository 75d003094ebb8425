"""The reward curve of a run, drawn from its ``metrics.jsonl``."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlcore.api import RLCoreError, read_metrics

if TYPE_CHECKING:
    from matplotlib.axes import Axes

TRAIN_MEAN = "critic/score/mean"
TRAIN_MIN = "critic/score/min"
TRAIN_MAX = "critic/score/max"
#: zlib level of the report's PNGs: 3 encodes in about 60 % of the default 6's time, for files ~5 % larger
PNG_COMPRESS_LEVEL = 3
#: validation reward keys: ``val-core/<data_source>/reward/mean@<N>``
VAL_REWARD = re.compile(r"^val-core/(?P<source>.+)/reward/mean@(?P<n>\d+)$")


def finite_number(value: Any) -> float | None:
    """``value`` as a float if it is a finite number (not a bool), else ``None``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def records_by_step(records: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """Merge the records per step, a later record's values winning (a resumed run repeats steps)."""
    merged: dict[int, dict[str, Any]] = {}
    for record in records:
        step = record.get("step")
        if isinstance(step, int) and not isinstance(step, bool):
            merged.setdefault(step, {}).update(record)
    return dict(sorted(merged.items()))


def binary_rewards(steps: dict[int, dict[str, Any]]) -> bool:
    """Whether the training rewards look 0/1: at every step that logged them, the lowest score is 0 and the
    highest 1 (or all are equal to one of them). Their mean is then the share of correct responses, and a
    min–max band would span 0 to 1 at every step."""
    seen = False
    for record in steps.values():
        low, high = finite_number(record.get(TRAIN_MIN)), finite_number(record.get(TRAIN_MAX))
        if low is None or high is None:
            continue
        if low not in (0.0, 1.0) or high not in (0.0, 1.0):
            return False
        seen = True
    return seen


#: legend labels longer than this go under the plot rather than beside it (run names in a comparison)
LONG_LABEL = 24


def outside_legend(ax: Axes, fontsize: int = 7) -> None:
    """The axes' legend outside the plot, where it covers no data: to its right, or under it (below the
    step axis) when a label is long enough to squeeze the plot."""
    _, labels = ax.get_legend_handles_labels()
    if max((len(label) for label in labels), default=0) > LONG_LABEL:
        ax.legend(loc="upper left", bbox_to_anchor=(0.0, -0.22), borderaxespad=0.0, fontsize=fontsize)
    else:
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, fontsize=fontsize)


def plot_reward_curve(metrics_path: str | Path, out_png: str | Path) -> Path:
    """Plot training and validation reward against the step and save the figure as a PNG.

    Training: ``critic/score/mean`` as a line, with a shaded ``critic/score/min``..``max`` band unless the
    rewards are 0/1 (:func:`binary_rewards`: the mean is then the share of correct responses). Validation: each ``val-core/*/reward/mean@*`` key as markers on the same axes. ``metrics_path`` is a
    ``metrics.jsonl`` file or a run directory holding one. Returns the path of the PNG; raises
    :class:`RLCoreError` when the file is missing, empty or holds no reward metric.
    """
    metrics_path = Path(metrics_path)
    records = read_metrics(metrics_path)
    if not records:
        raise RLCoreError(f"metrics file {metrics_path} is empty: no step was logged, nothing to plot")
    steps = records_by_step(records)

    train: list[tuple[int, float, float | None, float | None]] = []
    validation: dict[str, list[tuple[int, float]]] = {}
    for step, record in steps.items():
        mean = finite_number(record.get(TRAIN_MEAN))
        if mean is not None:
            train.append((step, mean, finite_number(record.get(TRAIN_MIN)), finite_number(record.get(TRAIN_MAX))))
        for key, value in record.items():
            match = VAL_REWARD.match(key)
            number = finite_number(value)
            if match and number is not None:
                validation.setdefault(f"val {match['source']} mean@{match['n']}", []).append((step, number))
    if not train and not validation:
        raise RLCoreError(
            f"{metrics_path} holds no reward metric to plot ({TRAIN_MEAN} or val-core/<source>/reward/mean@N)"
        )

    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    fig = Figure(figsize=(9.5, 4.5), dpi=120)  # the PNG's resolution: one renderer lays out and draws
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    if train:
        binary = binary_rewards(steps)
        xs = [row[0] for row in train]
        label = "train: share correct" if binary else "train score (mean)"
        ax.plot(xs, [row[1] for row in train], color="tab:blue", linewidth=1.5, label=label)
        band = [(row[0], row[2], row[3]) for row in train if row[2] is not None and row[3] is not None]
        if band and not binary:
            ax.fill_between(
                [step for step, _, _ in band],
                [low for _, low, _ in band],
                [high for _, _, high in band],
                color="tab:blue",
                alpha=0.2,
                linewidth=0,
                label="train score (min-max)",
            )
    markers = "osD^v<>p*"
    colors = ["tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown", "tab:pink", "tab:olive"]
    for index, (label, points) in enumerate(sorted(validation.items())):
        ax.plot(
            [p[0] for p in points],
            [p[1] for p in points],
            linestyle="none",
            marker=markers[index % len(markers)],
            markersize=7,
            color=colors[index % len(colors)],
            label=label,
        )
    ax.set_title(f"Reward: {metrics_path.parent.name if metrics_path.is_file() else metrics_path.name}")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("step")
    ax.set_ylabel("reward")
    ax.grid(True, alpha=0.3)
    outside_legend(ax, fontsize=9)
    out_png = Path(out_png)
    out_png.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(out_png, pil_kwargs={"compress_level": PNG_COMPRESS_LEVEL})
    return out_png
