"""``rlcore report``: plots and a one-page HTML summary of one or more run directories.

A report is a folder holding

``report.png``
    every panel in one figure. An RL run has :data:`RL_PANELS`: training reward (for 0/1 rewards the share
    of correct responses, otherwise the mean with its min–max band), validation reward, response length,
    KL, entropy, pg clip fraction, throughput, time per stage. An SFT run (``rlcore sft``) has
    :data:`SFT_PANELS`: train and validation loss, greedy validation accuracy, learning rate, gradient norm,
    throughput, time per stage;
``panels/<name>.png``
    each panel on its own;
``index.html``
    the runs, the panels, the run-health findings (``summary.json``'s ``"health"``, or the
    ``health/<monitor>/*`` metrics of a run without a summary), the final metrics, the config highlights,
    the presets with the keys each one set, and the plugin versions, with the images linked (relative paths,
    so the folder can be moved or served as is).

Given several runs, each panel draws one line per run (legend by run name), the time panel one stacked
bar per run, and the config table marks the keys whose values differ. Legends sit beside the plot, never
on the data. A metric a run does not have is left out; a panel no run has data for says "no data". The step
of each finding is marked by a dotted vertical line on the panels that plot its signal.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from rlcore.api import METRICS_FILE, PRESETS_FILE, RLCoreError, format_value, read_metrics, short_label
from rlcore_plugin_report.plot import (
    PNG_COMPRESS_LEVEL,
    binary_rewards,
    finite_number,
    outside_legend,
    records_by_step,
)

if TYPE_CHECKING:
    import numpy as np
    from matplotlib.axes import Axes

REPORT_PNG = "report.png"
REPORT_HTML = "index.html"
PANELS_DIR = "panels"
#: the validation reward (and accuracy) keys: ``val-core/<source>/{reward,acc}/mean@N``
VAL_CORE = re.compile(r"^val-core/.+/(reward|acc)/mean@\d+$")
TIMING_PREFIX = "timing_s/"
TIMING_TOTAL = "timing_s/step"
TRAIN_SCORE = "critic/score/mean"
#: the metrics the run-health loop writes: ``health/<monitor>/finding`` (and ``.../began_at``)
HEALTH_FINDING = re.compile(r"^health/(?P<monitor>.+)/finding$")
#: the config keys of an RL run shown in the report, in order (the presets come first)
CONFIG_HIGHLIGHTS: tuple[str, ...] = (
    "actor_rollout_ref.model.path",
    "algorithm.adv_estimator",
    "actor_rollout_ref.actor.policy_loss.loss_mode",
    "actor_rollout_ref.actor.loss_agg_mode",
    "reward_model.reward_manager",
    "algorithm.batch_filters",
    "actor_rollout_ref.actor.strategy",
    "actor_rollout_ref.rollout.name",
    "data.train_files",
    "data.val_files",
    "data.train_batch_size",
    "actor_rollout_ref.rollout.n",
    "actor_rollout_ref.actor.ppo_mini_batch_size",
    "actor_rollout_ref.actor.ppo_epochs",
    "actor_rollout_ref.actor.optim.lr",
    "actor_rollout_ref.actor.clip_ratio",
    "actor_rollout_ref.actor.clip_ratio_low",
    "actor_rollout_ref.actor.clip_ratio_high",
    "actor_rollout_ref.actor.use_kl_loss",
    "actor_rollout_ref.actor.kl_loss_coef",
    "algorithm.use_kl_in_reward",
    "actor_rollout_ref.rollout.temperature",
    "data.max_prompt_length",
    "data.max_response_length",
    "trainer.total_training_steps",
    "trainer.logger",
    "trainer.seed",
)
#: the config keys of an SFT run shown in the report, in order
SFT_CONFIG_HIGHLIGHTS: tuple[str, ...] = (
    "model.partial_pretrain",
    "model.strategy",
    "data.train_files",
    "data.val_files",
    "data.train_batch_size",
    "data.max_length",
    "optim.lr",
    "optim.lr_scheduler",
    "trainer.total_training_steps",
    "trainer.seed",
)
COLORS = (
    "tab:blue",
    "tab:orange",
    "tab:green",
    "tab:red",
    "tab:purple",
    "tab:brown",
    "tab:pink",
    "tab:olive",
    "tab:cyan",
    "tab:gray",
)
LINESTYLES = ("-", "--", ":", "-.")


# ------------------------------------------------------------------------------------------- runs
@dataclass
class RunData:
    """One run directory, read back: its metrics merged per step, config, plugins and summary."""

    name: str
    path: Path
    steps: dict[int, dict[str, Any]]
    config: dict[str, Any] = field(default_factory=dict)
    plugins: dict[str, str | None] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)
    #: the presets applied, in order: ``{"name", "keys": {key: {"preset": value, "final": value}}}``
    presets: list[dict[str, Any]] = field(default_factory=list)

    @property
    def kind(self) -> str:
        """``sft`` for a run of ``rlcore sft`` (its summary says so, or it logged a training loss and no
        reward), else ``rl``."""
        if self.summary.get("kind") == "sft":
            return "sft"
        keys = self.keys()
        return "sft" if "train/loss" in keys and "critic/score/mean" not in keys else "rl"

    def keys(self) -> list[str]:
        """Every metric key the run logged, sorted."""
        return sorted({key for record in self.steps.values() for key in record if key != "step"})

    def series(self, key: str) -> list[tuple[int, float]]:
        """``(step, value)`` of every step with a finite value of ``key``."""
        points = []
        for step, record in self.steps.items():
            value = finite_number(record.get(key))
            if value is not None:
                points.append((step, value))
        return points

    def last(self, key: str) -> tuple[int, float] | None:
        """The last ``(step, value)`` of ``key``, or ``None``."""
        points = self.series(key)
        return points[-1] if points else None

    def findings(self) -> list[dict[str, Any]]:
        """The run-health findings: ``summary.json``'s ``"health"`` rows, or, for a run without a summary (still
        running, or killed), one row per ``health/<monitor>/finding`` metric (no signal or message then)."""
        rows = self.summary.get("health")
        if isinstance(rows, list):
            return [row for row in rows if isinstance(row, dict) and "step" in row]
        found = []
        for step, record in sorted(self.steps.items()):
            for key in record:
                match = HEALTH_FINDING.match(key)
                if match and finite_number(record[key]):
                    began = finite_number(record.get(f"health/{match['monitor']}/began_at"))
                    found.append({"monitor": match["monitor"], "step": step, "began_at": int(began or step)})
        return found

    def config_value(self, dotted: str) -> Any:
        """The config value at ``a.b.c`` (``None`` when absent)."""
        node: Any = self.config
        for part in dotted.split("."):
            if not isinstance(node, dict) or part not in node:
                return None
            node = node[part]
        return node


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _read_json_list(path: Path) -> list[Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    return data if isinstance(data, list) else []


def load_run(path: str | Path, name: str | None = None) -> RunData:
    """Read a run directory (its ``metrics.jsonl``, and ``config.yaml``, ``plugins.json``, ``summary.json``
    when present). Raises :class:`RLCoreError` when it is missing, holds no metrics file or no step."""
    path = Path(path)
    if not path.is_dir():
        raise RLCoreError(f"run directory {path} does not exist")
    if not (path / METRICS_FILE).is_file():
        raise RLCoreError(f"{path} is not a run directory: it holds no {METRICS_FILE}")
    records = read_metrics(path / METRICS_FILE)
    if not records:
        raise RLCoreError(f"{path / METRICS_FILE} is empty: no step was logged, nothing to report")
    config: dict[str, Any] = {}
    if (path / "config.yaml").is_file():
        try:
            loaded = yaml.safe_load((path / "config.yaml").read_text(encoding="utf-8"))
            config = loaded if isinstance(loaded, dict) else {}
        except (OSError, yaml.YAMLError):
            config = {}
    plugins = {
        plugin: info.get("version")
        for plugin, info in _read_json(path / "plugins.json").items()
        if isinstance(info, dict) and not info.get("builtin")
    }
    presets = _read_json_list(path / PRESETS_FILE)
    return RunData(
        name=name or path.name,
        path=path,
        steps=records_by_step(records),
        config=config,
        plugins=plugins,
        summary=_read_json(path / "summary.json"),
        presets=[entry for entry in presets if isinstance(entry, dict) and "name" in entry],
    )


def run_names(paths: Sequence[Path]) -> list[str]:
    """Legend names: each directory's name, with as many parent folders as it takes to tell them apart."""
    resolved = [path.resolve() for path in paths]
    depth = 1
    while True:
        names = ["/".join(path.parts[-depth:]) for path in resolved]
        if len(set(names)) == len(names) or depth >= max(len(path.parts) for path in resolved):
            return names
        depth += 1


# ----------------------------------------------------------------------------------------- panels
@dataclass(frozen=True)
class Panel:
    """One plot of the report: ``draw(ax, runs)`` draws it and returns whether there was any data."""

    slug: str
    title: str
    ylabel: str
    draw: Callable[[Axes, list[RunData]], bool]


def _label(run: RunData, key: str, runs: list[RunData], keys: list[str]) -> str:
    if len(runs) == 1:
        return short_label(key)
    return run.name if len(keys) == 1 else f"{run.name}: {short_label(key)}"


def lines(*keys: str | re.Pattern[str], band: tuple[str, str] | None = None) -> Callable[[Axes, list[RunData]], bool]:
    """A panel drawing each of ``keys`` (names or regular expressions) as a line, one color per run and one
    line style per key; ``band=(min_key, max_key)`` shades the range around the first key."""

    def draw(ax: Axes, runs: list[RunData]) -> bool:
        drawn = False
        matched = [[k for k in run.keys() if any(_matches(p, k) for p in keys)] for run in runs]
        all_keys = sorted({k for names in matched for k in names}, key=lambda k: _order(keys, k))
        for index, (run, names) in enumerate(zip(runs, matched)):
            color = COLORS[index % len(COLORS)]
            for key in sorted(names, key=lambda k: _order(keys, k)):
                points = run.series(key)
                if not points:
                    continue
                style = LINESTYLES[all_keys.index(key) % len(LINESTYLES)]
                xs, ys = [p[0] for p in points], [p[1] for p in points]
                ax.plot(
                    xs,
                    ys,
                    linestyle=style,
                    color=color,
                    linewidth=1.5,
                    marker="o" if len(xs) <= 25 else None,
                    markersize=3,
                    label=_label(run, key, runs, all_keys),
                )
                drawn = True
                if band is not None and key == keys[0]:
                    _band(ax, run, xs, band, color)
                mark_findings(ax, run, key, color)
        if drawn:
            outside_legend(ax)
            ax.ticklabel_format(axis="y", useOffset=False)
        return drawn

    return draw


def mark_findings(ax: Axes, run: RunData, key: str, color: str) -> int:
    """A dotted vertical line, in the run's color, at the step of each of the run's findings about ``key``
    (the first labelled "health finding"); how many were drawn."""
    steps = sorted({int(row["step"]) for row in run.findings() if row.get("signal") == key})
    labelled = "health finding" in ax.get_legend_handles_labels()[1]
    for step in steps:
        ax.axvline(step, color=color, linestyle=":", linewidth=1.2, label=None if labelled else "health finding")
        labelled = True
    return len(steps)


def _band(ax: Axes, run: RunData, xs: list[int], band: tuple[str, str], color: str) -> None:
    """Shade the range between the run's ``band`` keys (low, high) at the steps ``xs`` that have both."""
    low, high = dict(run.series(band[0])), dict(run.series(band[1]))
    steps = [x for x in xs if x in low and x in high]
    if steps:
        ax.fill_between(steps, [low[x] for x in steps], [high[x] for x in steps], color=color, alpha=0.15, linewidth=0)


def draw_reward(ax: Axes, runs: list[RunData]) -> bool:
    """The training reward of each run: with 0/1 rewards (:func:`~rlcore_plugin_report.plot.binary_rewards`) its
    mean is the share of correct responses, drawn alone; otherwise the mean with its min–max band."""
    drawn = False
    for index, run in enumerate(runs):
        points = run.series(TRAIN_SCORE)
        if not points:
            continue
        binary = binary_rewards(run.steps)
        label = "share correct" if binary else short_label(TRAIN_SCORE)
        color = COLORS[index % len(COLORS)]
        xs, ys = [p[0] for p in points], [p[1] for p in points]
        marker = "o" if len(xs) <= 25 else None
        name = label if len(runs) == 1 else (f"{run.name}: {label}" if binary else run.name)
        ax.plot(xs, ys, color=color, linewidth=1.5, marker=marker, markersize=3, label=name)
        drawn = True
        if not binary:
            _band(ax, run, xs, ("critic/score/min", "critic/score/max"), color)
        mark_findings(ax, run, TRAIN_SCORE, color)
    if drawn:
        outside_legend(ax)
    return drawn


def _matches(pattern: str | re.Pattern[str], key: str) -> bool:
    return pattern.match(key) is not None if isinstance(pattern, re.Pattern) else pattern == key


def _order(patterns: Sequence[str | re.Pattern[str]], key: str) -> tuple[int, str]:
    return next(i for i, p in enumerate(patterns) if _matches(p, key)), key


def stage_times(run: RunData) -> tuple[list[int], dict[str, list[float]]]:
    """The training steps (those with ``timing_s/step``, the total, which is not a stage; any step with a
    stage time when no step has it) and ``{stage: seconds per step}`` (0 where a stage did not run), the
    stages ordered by total time."""
    stages = sorted({k for k in run.keys() if k.startswith(TIMING_PREFIX) and k != TIMING_TOTAL})
    timed = TIMING_TOTAL if run.series(TIMING_TOTAL) else None  # training steps (not validation-only step 0)
    steps = [
        s
        for s, record in run.steps.items()
        if any(finite_number(record.get(k)) is not None for k in ([timed] if timed else stages))
    ]
    times = {
        stage.removeprefix(TIMING_PREFIX): [finite_number(run.steps[s].get(stage)) or 0.0 for s in steps]
        for stage in stages
    }
    return steps, dict(sorted(times.items(), key=lambda item: -sum(item[1])))


def draw_stage_times(ax: Axes, runs: list[RunData]) -> bool:
    """One run: the stage times stacked over the steps, with the step total dashed. Several runs: one
    horizontal bar per run, stacked by the mean seconds per step of each stage."""
    import matplotlib

    timed = [(run, *stage_times(run)) for run in runs]
    timed = [(run, steps, times) for run, steps, times in timed if steps]
    if not timed:
        return False
    stages = list(dict.fromkeys(stage for _, _, times in timed for stage in times))
    cmap = matplotlib.colormaps["tab20"]
    colors = {stage: cmap(i % 20) for i, stage in enumerate(stages)}
    if len(runs) == 1:
        run, steps, times = timed[0]
        ax.stackplot(steps, *times.values(), labels=list(times), colors=[colors[s] for s in times], alpha=0.85)
        total = run.series(TIMING_TOTAL)
        if total:
            ax.plot([p[0] for p in total], [p[1] for p in total], "k--", linewidth=1, label="step (total)")
        outside_legend(ax, fontsize=6)
        return True
    names = [run.name for run, _, _ in timed]
    left = [0.0] * len(timed)
    for stage in stages:
        widths = [sum(times.get(stage, [])) / len(steps) for _, steps, times in timed]
        ax.barh(names, widths, left=left, color=colors[stage], label=stage)
        left = [a + b for a, b in zip(left, widths)]
    ax.set_xlabel("mean seconds per step")
    ax.invert_yaxis()
    outside_legend(ax, fontsize=6)
    return True


#: the panels of an RL run
RL_PANELS: tuple[Panel, ...] = (
    Panel("reward", "Training reward (0/1 rewards: share correct)", "score", draw_reward),
    Panel("val_reward", "Validation reward", "reward", lines(VAL_CORE)),
    Panel(
        "response_length",
        "Response length (min-max band)",
        "tokens",
        lines("response_length/mean", band=("response_length/min", "response_length/max")),
    ),
    Panel("kl", "KL", "kl", lines("actor/ppo_kl", "actor/kl_loss", "actor/reward_kl_penalty")),
    Panel("entropy", "Entropy", "nats / token", lines("actor/entropy")),
    Panel("pg_clipfrac", "PG clip fraction", "fraction", lines("actor/pg_clipfrac", "actor/pg_clipfrac_lower")),
    Panel("throughput", "Throughput", "tokens / s / device", lines("perf/throughput")),
    Panel("timing", "Time per stage", "seconds", draw_stage_times),
)
#: the panels of an SFT run (``rlcore sft``)
SFT_PANELS: tuple[Panel, ...] = (
    Panel("loss", "Loss (train, validation)", "nats / token", lines("train/loss", "val/loss")),
    Panel("val_accuracy", "Validation accuracy (greedy, exact)", "share of rows", lines("val/greedy_acc")),
    Panel("lr", "Learning rate", "lr", lines("train/lr")),
    Panel("grad_norm", "Gradient norm", "norm", lines("train/grad_norm")),
    Panel("throughput", "Throughput", "tokens / s / device", lines("perf/throughput")),
    Panel("timing", "Time per stage", "seconds", draw_stage_times),
)


def panels_for(runs: Sequence[RunData]) -> tuple[Panel, ...]:
    """The panels of the runs' kinds: RL, SFT, or both (each panel once) when a report compares the two."""
    kinds = {run.kind for run in runs}
    if kinds == {"sft"}:
        return SFT_PANELS
    if kinds == {"rl"}:
        return RL_PANELS
    slugs = {panel.slug for panel in RL_PANELS}
    return RL_PANELS + tuple(panel for panel in SFT_PANELS if panel.slug not in slugs)


#: the metrics of the final-metrics table (validation keys are added per run; rows no run has are left out)
FINAL_KEYS: tuple[str, ...] = (
    "val/greedy_acc",
    "val/loss",
    "train/loss",
    "critic/score/mean",
    "response_length/mean",
    "actor/entropy",
    "actor/ppo_kl",
    "actor/kl_loss",
    "actor/pg_clipfrac",
    "actor/pg_loss",
    "perf/throughput",
    "timing_s/step",
)


# ----------------------------------------------------------------------------------------- report
@dataclass
class Report:
    """Where a report was written, and which panels had data."""

    out_dir: Path
    png: Path
    html: Path
    panels: dict[str, Path]
    has_data: dict[str, bool]
    runs: list[RunData]


def _draw_panel(ax: Axes, panel: Panel, runs: list[RunData]) -> bool:
    from matplotlib.ticker import MaxNLocator

    ax.set_title(panel.title, fontsize=11)
    drawn = panel.draw(ax, runs)
    if not drawn:
        ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes, fontsize=14, color="gray")
        ax.set_xticks([])
        ax.set_yticks([])
        return False
    if not ax.get_xlabel():  # a panel drawn against the step (the multi-run time panel has its own axes)
        ax.set_xlabel("step")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel(panel.ylabel)
    ax.grid(True, alpha=0.3)
    return True


def write_report(run_dirs: Iterable[str | Path], out_dir: str | Path | None = None) -> Report:
    """Write the report of ``run_dirs`` into ``out_dir`` and return where everything is.

    ``out_dir`` defaults to ``<run_dir>/report`` for one run and ``./rlcore-report`` for several. Raises
    :class:`RLCoreError` when no run is given or a run directory is missing, not a run or empty, and when the
    report cannot be written (a full disk, a read-only folder: one line naming the folder and the reason).
    """
    paths = [Path(p) for p in run_dirs]
    if not paths:
        raise RLCoreError("no run directory given")
    runs = [load_run(path, name) for path, name in zip(paths, run_names(paths))]
    out = Path(out_dir) if out_dir is not None else (paths[0] / "report" if len(paths) == 1 else Path("rlcore-report"))
    try:
        return _write_files(runs, out)
    except OSError as exc:
        from rlcore.api import disk_problem, shown_path

        why = disk_problem(exc, out) or exc.strerror or str(exc)
        where = f" ({shown_path(exc.filename)})" if isinstance(exc.filename, str) else ""
        raise RLCoreError(f"cannot write the report into {shown_path(out)}: {why}{where}") from exc


def _write_files(runs: list[RunData], out: Path) -> Report:
    """Draw the panels of ``runs`` and write the report's files into ``out``."""
    (out / PANELS_DIR).mkdir(parents=True, exist_ok=True)
    panels = panels_for(runs)
    has_data: dict[str, bool] = {}
    panel_pngs: dict[str, Path] = {}
    images = []
    for panel in panels:
        panel_pngs[panel.slug] = out / PANELS_DIR / f"{panel.slug}.png"
        has_data[panel.slug], image = _panel_png(panel, runs, panel_pngs[panel.slug])
        images.append(image)
    png = out / REPORT_PNG
    _grid_png(images, "rlcore report: " + " vs ".join(run.name for run in runs), png)
    html_path = out / REPORT_HTML
    html_path.write_text(render_html(runs, out, panels, panel_pngs, has_data), encoding="utf-8")
    return Report(out_dir=out, png=png, html=html_path, panels=panel_pngs, has_data=has_data, runs=runs)


#: the panels' size in inches and resolution: 576 x 360 pixels
PANEL_SIZE, PANEL_DPI = (6.4, 4.0), 90


def _panel_png(panel: Panel, runs: list[RunData], path: Path) -> tuple[bool, np.ndarray]:
    """Draw ``panel`` of ``runs`` into ``path``; return whether it had data and its RGB pixels (for
    ``report.png``). The figure is made at the PNG's resolution, without pyplot, so that the layout pass and the
    drawing measure their texts with one renderer."""
    import numpy as np
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=PANEL_SIZE, dpi=PANEL_DPI)
    canvas = FigureCanvasAgg(fig)
    drawn = _draw_panel(fig.add_subplot(), panel, runs)
    fig.tight_layout()
    fig.savefig(path, pil_kwargs={"compress_level": PNG_COMPRESS_LEVEL})
    return drawn, np.asarray(canvas.buffer_rgba())[..., :3].copy()


def _grid_png(images: list[np.ndarray], title: str, path: Path, columns: int = 2) -> None:
    """Write ``path``: the panels' RGB pixels ``images`` in a grid of ``columns`` under ``title``. The panels are
    laid out from the pixels they were saved with rather than drawn a second time (drawing is most of a report's
    time), and the grid is written as pixels: only the title strip is drawn (drawing the whole grid as a figure
    image took ~200 MB)."""
    import numpy as np
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from PIL import Image

    height = max(image.shape[0] for image in images)
    width = max(image.shape[1] for image in images)
    dpi, title_height = 100, 48
    strip = Figure(figsize=(columns * width / dpi, title_height / dpi), dpi=dpi, facecolor="white")
    canvas = FigureCanvasAgg(strip)
    strip.text(0.5, 0.5, title, ha="center", va="center", fontsize=13)
    canvas.draw()
    title_pixels = np.asarray(canvas.buffer_rgba())[..., :3]
    rows = -(-len(images) // columns)
    grid = np.full((title_pixels.shape[0] + rows * height, columns * width, 3), 255, dtype=np.uint8)
    grid[: title_pixels.shape[0], : title_pixels.shape[1]] = title_pixels[:, : columns * width]
    for index, image in enumerate(images):
        top, left = title_pixels.shape[0] + (index // columns) * height, (index % columns) * width
        grid[top : top + image.shape[0], left : left + image.shape[1]] = image
    Image.fromarray(grid).save(path, format="png", compress_level=PNG_COMPRESS_LEVEL)


# ------------------------------------------------------------------------------------------- html
STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1300px; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; vertical-align: top; }
th { background: #f3f3f3; }
tr.diff td { background: #fff4d6; }
.panels { display: grid; grid-template-columns: repeat(auto-fill, minmax(560px, 1fr)); gap: 1em; }
figure { margin: 0; } figure img { width: 100%; } figcaption { font-weight: 600; }
.nodata { color: #888; font-weight: normal; }
code { font-size: 0.95em; }
"""


def _e(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, (list, dict)):
        return html.escape(json.dumps(value))
    return html.escape(str(value))


def _table(headers: Sequence[str], rows: Sequence[tuple[str, Sequence[str]]]) -> str:
    """An HTML table; each row is ``(css class, already-escaped cells)``."""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = []
    for cls, cells in rows:
        attribute = f' class="{cls}"' if cls else ""
        body.append(f"<tr{attribute}>" + "".join(f"<td>{cell}</td>" for cell in cells) + "</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


def _presets_section(runs: list[RunData]) -> list[str]:
    """The "Presets" section: per run with presets, each key a preset set, its value and the run's final one
    (a row is marked when a later preset, file or override changed it)."""
    with_presets = [run for run in runs if run.presets]
    if not with_presets:
        return []
    parts = ["<h2>Presets</h2>"]
    for run in with_presets:
        if len(runs) > 1:
            parts.append(f"<h3>{_e(run.name)}</h3>")
        rows = []
        for entry in run.presets:
            for key, values in (entry.get("keys") or {}).items():
                preset, final = values.get("preset"), values.get("final")
                changed = json.dumps(preset, default=str) != json.dumps(final, default=str)
                rows.append(
                    ("diff" if changed else "", [_e(entry["name"]), f"<code>{_e(key)}</code>", _e(preset), _e(final)])
                )
        parts.append(_table(["preset", "key", "preset's value", "run's value"], rows))
    parts.append(
        "<p>Highlighted rows: a later preset, a config file or the command line changed the preset's value.</p>"
    )
    return parts


def _health_section(runs: list[RunData]) -> list[str]:
    """The "Run health" section: each run's findings (step, began at, severity, monitor, signal, message,
    action), or a line saying there were none."""
    parts = ["<h2>Run health</h2>"]
    for run in runs:
        if len(runs) > 1:
            parts.append(f"<h3>{_e(run.name)}</h3>")
        findings = run.findings()
        if not findings:
            parts.append("<p>No run-health findings.</p>")
            continue
        keys = ("step", "began_at", "severity", "monitor", "signal", "message", "action")
        rows = [("", [_e(row.get(key)) for key in keys]) for row in findings]
        parts.append(_table(["step", "began at", "severity", "monitor", "signal", "message", "action"], rows))
    return parts


def _relative(path: Path, start: Path) -> str:
    try:
        return path.resolve().relative_to(start.resolve()).as_posix()
    except ValueError:
        return path.resolve().as_uri()


def render_html(
    runs: list[RunData],
    out: Path,
    panels: Sequence[Panel],
    panel_pngs: dict[str, Path],
    has_data: dict[str, bool],
) -> str:
    """The report page: runs, panels (with their titles), final metrics, config highlights, presets, plugin
    versions."""
    from rlcore import __version__

    names = [run.name for run in runs]
    parts = [
        "<!doctype html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>rlcore report: {html.escape(' vs '.join(names))}</title>",
        f"<style>{STYLE}</style></head><body>",
        f"<h1>rlcore report: {html.escape(' vs '.join(names))}</h1>",
        f"<p>Written {datetime.now().strftime('%Y-%m-%d %H:%M:%S')} by rlcore {html.escape(str(__version__))}. "
        f'All panels in one image: <a href="{REPORT_PNG}">{REPORT_PNG}</a>.</p>',
        "<h2>Runs</h2>",
    ]
    run_rows = []
    for run in runs:
        steps = [s for s in run.steps if s > 0]
        run_rows.append(
            (
                "",
                [
                    _e(run.name),
                    f"<code>{_e(run.path.resolve())}</code>",
                    _e(len(steps)),
                    _e(max(run.steps)),
                    _e(run.summary.get("wall_time_s")),
                    _e(run.summary.get("peak_rss_mb")),
                ],
            )
        )
    parts.append(
        _table(["run", "directory", "training steps", "last step", "wall time (s)", "peak RSS (MB)"], run_rows)
    )
    parts.append('<h2>Plots</h2><div class="panels">')
    for panel in panels:
        src = _relative(panel_pngs[panel.slug], out)
        note = "" if has_data.get(panel.slug) else ' <span class="nodata">(no data)</span>'
        parts.append(
            f'<figure data-panel="{html.escape(panel.slug)}"><figcaption>{html.escape(panel.title)}{note}</figcaption>'
            f'<a href="{html.escape(src)}"><img src="{html.escape(src)}" alt="{html.escape(panel.title)}"></a></figure>'
        )
    parts.append("</div>")
    parts.extend(_health_section(runs))

    parts.append("<h2>Final metrics</h2>")
    keys = [*dict.fromkeys(k for run in runs for k in run.keys() if VAL_CORE.match(k)), *FINAL_KEYS]
    metric_rows = []
    for key in keys:
        cells = []
        for run in runs:
            last = run.last(key)
            cells.append("-" if last is None else f"{_e(format_value(last[1]))} <small>(step {last[0]})</small>")
        if any(cell != "-" for cell in cells):
            metric_rows.append(("", [f"<code>{_e(key)}</code>", *cells]))
    parts.append(_table(["metric", *names], metric_rows))

    parts.append("<h2>Config highlights</h2>")
    config_rows = []
    preset_names = [", ".join(entry["name"] for entry in run.presets) or None for run in runs]
    rows_of = [("presets", preset_names)]
    kinds = {run.kind for run in runs}
    config_keys = (CONFIG_HIGHLIGHTS if "rl" in kinds else ()) + (SFT_CONFIG_HIGHLIGHTS if "sft" in kinds else ())
    rows_of += [(key, [run.config_value(key) for run in runs]) for key in config_keys]
    for key, values in rows_of:
        differs = len(runs) > 1 and len({json.dumps(v, sort_keys=True, default=str) for v in values}) > 1
        config_rows.append(("diff" if differs else "", [f"<code>{_e(key)}</code>", *(_e(v) for v in values)]))
    parts.append(_table(["key", *names], config_rows))
    if len(runs) > 1:
        parts.append("<p>Highlighted rows differ between the runs.</p>")
    parts.extend(_presets_section(runs))

    parts.append("<h2>Plugins</h2>")
    plugins = sorted({name for run in runs for name in run.plugins})
    if plugins:
        parts.append(
            _table(
                ["plugin", *names],
                [("", [_e(plugin), *(_e(run.plugins.get(plugin)) for run in runs)]) for plugin in plugins],
            )
        )
    else:
        parts.append("<p>No external plugins recorded (plugins.json missing or empty).</p>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"
