"""``rlcore report``: the plots and the HTML page of real run directories, one run and two compared."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner
from rlcore_plugin_report.report import RL_PANELS, RunData, draw_reward, lines, run_names, write_report
from rlcore_plugin_report.summary import end_of_run_lines
from rlcore_testkit.runs import make_tiny_task, tiny_run

from rlcore import load_plugins
from rlcore.cli import cli
from rlcore.errors import RLCoreError
from rlcore.tracking.sinks import read_metrics

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def rlcore_cli() -> click.Group:
    """rlcore's command line with the plugins' sub-commands (``rlcore report`` among them), as the ``rlcore``
    script builds it."""
    load_plugins().add_commands(cli)
    return cli


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path) -> Path:
    """A real two-step GRPO run with the KL loss on (so the KL panel has two curves), and its report
    (``trainer.report=true``: the test kit's tiny runs draw none)."""
    tmp = tmp_path_factory.mktemp("report-run")
    task = make_tiny_task(tmp / "task")
    _, path = tiny_run(
        tmp,
        tiny_model_dir,
        task,
        "algorithm.adv_estimator=grpo",
        "actor_rollout_ref.actor.use_kl_loss=true",
        "trainer.report=true",
    )
    return path


@pytest.fixture(scope="module")
def sparse_run_dir(run_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the run whose metrics lack entropy, KL and every timing (as a run of an older or a
    different framework would), with a different learning rate in its config."""
    copy = tmp_path_factory.mktemp("sparse") / "sparse-run"
    shutil.copytree(run_dir, copy, ignore=shutil.ignore_patterns("report", "*.png"))
    dropped = re.compile(r"^(actor/entropy|actor/ppo_kl|actor/kl_loss|timing_s/.*)$")
    records = [{k: v for k, v in r.items() if not dropped.match(k)} for r in read_metrics(copy)]
    (copy / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    config = (copy / "config.yaml").read_text()
    (copy / "config.yaml").write_text(config.replace("lr: 0.001", "lr: 0.0005", 1))
    return copy


def assert_png(path: Path, min_width: int = 300, min_height: int = 200) -> Any:
    """The file is a PNG that matplotlib reads back, at least ``min_width`` x ``min_height``; returns it."""
    import matplotlib.image

    assert path.read_bytes()[:8] == PNG_SIGNATURE, path
    image = matplotlib.image.imread(path)
    assert image.shape[0] >= min_height and image.shape[1] >= min_width, image.shape
    assert image[..., :3].std() > 0.01, f"{path} is blank"
    return image


def panel_captions(page: str) -> dict[str, str]:
    """``{panel slug: figcaption text}`` of the report page."""
    found = re.findall(r'<figure data-panel="([^"]+)"><figcaption>(.*?)</figcaption>', page)
    return {slug: re.sub(r"<[^>]+>", "", caption) for slug, caption in found}


def test_rlcore_run_writes_the_report(run_dir: Path) -> None:
    page = (run_dir / "report" / "index.html").read_text()
    assert set(panel_captions(page)) == {panel.slug for panel in RL_PANELS}
    assert_png(run_dir / "report" / "report.png", 900, 1000)
    assert_png(run_dir / "reward_curve.png")


def test_report_of_one_run(run_dir: Path, tmp_path: Path, rlcore_cli: click.Group) -> None:
    result = CliRunner().invoke(rlcore_cli, ["report", str(run_dir), "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    out = tmp_path / "out"
    assert f"report: {out / 'index.html'}" in result.output and "no data" not in result.output
    image = assert_png(out / "report.png", 900, 1000)
    assert image.shape[0] > image.shape[1]  # four rows of two panels
    page = (out / "index.html").read_text()
    captions = panel_captions(page)
    assert list(captions) == [panel.slug for panel in RL_PANELS]
    for panel in RL_PANELS:
        assert captions[panel.slug] == panel.title  # no "(no data)": a real run has every metric
        assert f'src="panels/{panel.slug}.png"' in page
        assert_png(out / "panels" / f"{panel.slug}.png")
    assert 'href="report.png"' in page
    for text in (
        "actor_rollout_ref.actor.optim.lr",
        "rlcore-plugin-grpo",
        "critic/score/mean",
        "val-core/tiny/digits/reward/mean@1",
        "wall time (s)",
        "<td>grpo</td>",
    ):
        assert text in page, text


def test_missing_metrics_say_no_data(sparse_run_dir: Path, tmp_path: Path) -> None:
    report = write_report([sparse_run_dir], tmp_path / "out")
    assert report.has_data == {
        "reward": True,
        "val_reward": True,
        "response_length": True,
        "kl": False,
        "entropy": False,
        "pg_clipfrac": True,
        "throughput": True,
        "timing": False,
    }
    captions = panel_captions(report.html.read_text())
    assert captions["entropy"] == "Entropy (no data)" and captions["reward"].startswith("Training reward")
    assert_png(report.panels["entropy"])  # a panel saying "no data", not a crash
    assert_png(report.png, 900, 1000)


def test_compare_two_runs(run_dir: Path, sparse_run_dir: Path, tmp_path: Path) -> None:
    report = write_report([run_dir, sparse_run_dir], tmp_path / "compare")
    assert [run.name for run in report.runs] == [run_dir.name, "sparse-run"]
    assert report.has_data["kl"] and report.has_data["timing"]  # the first run has them
    assert_png(report.png, 900, 1000)
    page = report.html.read_text()
    assert f"rlcore report: {run_dir.name} vs sparse-run" in page
    lr_row = re.search(r'<tr class="diff"><td><code>actor_rollout_ref.actor.optim.lr</code></td>(.*?)</tr>', page)
    assert lr_row and "0.001" in lr_row.group(1) and "0.0005" in lr_row.group(1)
    assert '<tr class="diff"><td><code>algorithm.adv_estimator' not in page  # same in both runs


def test_the_end_of_a_run_names_its_report_and_curve(sparse_run_dir: Path, tmp_path: Path) -> None:
    """The summary's lines at the end of a run: an RL run's report and reward curve, an SFT run's report only."""
    run = tmp_path / "run"
    shutil.copytree(sparse_run_dir, run)
    assert end_of_run_lines(run) == [
        f"report:        {run / 'report' / 'index.html'} (plots: {run / 'report' / 'report.png'})",
        f"reward curve:  {run / 'reward_curve.png'}",
    ]
    assert_png(run / "reward_curve.png")
    (run / "reward_curve.png").unlink()
    (run / "summary.json").write_text(json.dumps({"kind": "sft", "status": "completed"}))
    assert end_of_run_lines(run) == [f"report:        {run / 'report' / 'index.html'}"]
    assert not (run / "reward_curve.png").exists()


def test_trainer_report_false_draws_nothing_and_says_how_to_draw_it(
    sparse_run_dir: Path, tmp_path: Path, rlcore_cli: click.Group
) -> None:
    """``trainer.report: false`` in a run's config: its end draws no report and no reward curve, and its summary's
    line names the command that draws them later, which does."""
    run = tmp_path / "run"
    shutil.copytree(sparse_run_dir, run, ignore=shutil.ignore_patterns("report", "reward_curve.png"))
    config = (run / "config.yaml").read_text()
    assert "\n  report: true\n" in config  # the key the plugin adds to the trainer section, as the run saved it
    (run / "config.yaml").write_text(config.replace("\n  report: true\n", "\n  report: false\n", 1))
    assert end_of_run_lines(run) == [f"report:        not drawn (trainer.report: false); rlcore report {run} draws it"]
    assert not (run / "report").exists() and not (run / "reward_curve.png").exists()
    result = CliRunner().invoke(rlcore_cli, ["report", str(run)])
    assert result.exit_code == 0, result.output
    assert_png(run / "report" / "report.png", 900, 1000)


def test_trainer_report_is_a_checked_key_of_the_plugin() -> None:
    """``trainer.report`` is the plugin's typed key: a dry run takes a boolean and names the key for anything
    else."""
    from rlcore_testkit.runs import dry_run

    assert dry_run("trainer.report=false").exit_code == 0
    refused = dry_run("trainer.report=maybe")
    assert refused.exit_code != 0 and "trainer.report" in refused.output, refused.output


def test_the_end_of_a_run_without_matplotlib_says_so_and_does_not_fail(sparse_run_dir: Path, tmp_path: Path) -> None:
    """A machine without matplotlib (the lent GPU machines have none): the run has finished, so its summary names
    the missing library and the fix instead of ending the run with a traceback."""
    run = tmp_path / "run"
    shutil.copytree(sparse_run_dir, run)
    code = (
        "import sys; sys.modules['matplotlib'] = None\n"
        "from pathlib import Path\n"
        "from rlcore_plugin_report.summary import end_of_run_lines\n"
        f"print('\\n'.join(end_of_run_lines(Path({str(run)!r}))))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    report, curve = result.stdout.splitlines()
    assert report.startswith("report:        not written: matplotlib is not installed here")
    assert curve.startswith("reward curve:  not drawn: matplotlib is not installed here")
    assert report.endswith("pip install matplotlib (rlcore-plugin-report depends on it)")
    assert not (run / "reward_curve.png").exists()


def test_run_names_tell_same_named_runs_apart() -> None:
    assert run_names([Path("/r/a/run-1"), Path("/r/b/run-2")]) == ["run-1", "run-2"]
    assert run_names([Path("/r/a/run-1"), Path("/r/b/run-1")]) == ["a/run-1", "b/run-1"]
    assert run_names([Path("/r/x/a/run-1"), Path("/r/y/a/run-1")]) == ["x/a/run-1", "y/a/run-1"]


def test_report_errors(tmp_path: Path, rlcore_cli: click.Group) -> None:
    runner = CliRunner()
    result = runner.invoke(rlcore_cli, ["report", str(tmp_path / "missing")])
    assert result.exit_code == 2 and "does not exist" in result.output
    (tmp_path / "not-a-run").mkdir()
    result = runner.invoke(rlcore_cli, ["report", str(tmp_path / "not-a-run")])
    assert result.exit_code == 2 and "not a run directory" in result.output and "metrics.jsonl" in result.output
    (tmp_path / "empty-run").mkdir()
    (tmp_path / "empty-run" / "metrics.jsonl").write_text("")
    with pytest.raises(RLCoreError, match="no step was logged"):
        write_report([tmp_path / "empty-run"])
    with pytest.raises(RLCoreError, match="no run directory"):
        write_report([])
    assert not (tmp_path / "empty-run" / "report").exists()


def binary_run(name: str, scores: list[tuple[float, float, float]]) -> RunData:
    """A run whose training scores are ``(mean, min, max)`` per step."""
    steps = {
        step: {"critic/score/mean": mean, "critic/score/min": low, "critic/score/max": high}
        for step, (mean, low, high) in enumerate(scores, start=1)
    }
    return RunData(name=name, path=Path(name), steps=steps)


def test_binary_rewards_are_drawn_as_the_share_correct() -> None:
    """0/1 rewards: the mean is the share of correct responses, drawn without the min-max band (which would
    span 0 to 1 at every step); other rewards keep their band; a run without training scores (validation only)
    draws no line, and alone leaves the panel without data."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    binary = binary_run("binary", [(0.25, 0.0, 1.0), (0.5, 0.0, 1.0), (1.0, 1.0, 1.0)])
    graded = binary_run("graded", [(0.4, 0.1, 0.9), (0.5, 0.2, 0.8), (0.6, 0.0, 1.0)])
    unscored = RunData(name="val-only", path=Path("val-only"), steps={0: {"val-core/x/reward/mean@1": 0.5}})
    for runs, band, labels in (
        ([binary], False, ["share correct"]),
        ([graded], True, ["score/mean"]),
        ([binary, graded], True, ["binary: share correct", "graded"]),
        ([unscored, graded], True, ["graded"]),
    ):
        fig, ax = plt.subplots()
        try:
            assert draw_reward(ax, runs)
            assert bool(ax.collections) == band  # fill_between adds the band
            assert [text.get_text() for text in ax.get_legend().get_texts()] == labels
        finally:
            plt.close(fig)
    fig, ax = plt.subplots()
    try:
        assert not draw_reward(ax, [unscored]) and not ax.lines
    finally:
        plt.close(fig)


def test_legends_sit_outside_the_data() -> None:
    """A panel's legend is outside its axes, so it covers no data point: to the right for short labels, under
    the plot for long ones (the run names of a comparison), inside the figure either way."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scores = [(0.1 * i, 0.0, 1.0) for i in range(1, 9)]
    for runs, side in (
        ([binary_run("run", scores)], "right"),
        ([binary_run("arith-grpo-20261126-220845", scores), binary_run("arith-dapo-20261126-221809", scores)], "below"),
    ):
        fig, ax = plt.subplots(figsize=(6.4, 4.0))
        try:
            assert lines("critic/score/mean", "critic/score/max")(ax, runs)
            fig.tight_layout()
            fig.canvas.draw()
            legend = ax.get_legend().get_window_extent()
            axes = ax.get_window_extent()
            assert legend.x0 >= axes.x1 if side == "right" else legend.y1 <= axes.y0, (side, legend, axes)
            assert fig.bbox.x0 - 1 <= legend.x0 and legend.x1 <= fig.bbox.x1 + 1 and legend.y0 >= fig.bbox.y0 - 1
        finally:
            plt.close(fig)


def test_findings_are_marked_on_the_plots_of_their_signals() -> None:
    """A finding about a plotted key draws one dotted vertical line at its step (labelled once); a finding
    about another signal draws none."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    run = binary_run("graded", [(0.4, 0.1, 0.9), (0.5, 0.2, 0.8), (0.6, 0.0, 1.0)])
    run.summary = {
        "health": [
            {"monitor": "m", "signal": "critic/score/mean", "step": 2, "began_at": 2, "message": "up"},
            {"monitor": "m", "signal": "critic/score/mean", "step": 3, "began_at": 3, "message": "up"},
            {"monitor": "n", "signal": "actor/entropy", "step": 1, "began_at": 1, "message": "low"},
        ]
    }
    for draw in (draw_reward, lines("critic/score/mean")):
        fig, ax = plt.subplots()
        try:
            assert draw(ax, [run])
            marks = [line for line in ax.get_lines() if line.get_linestyle() == ":"]
            assert [line.get_xdata()[0] for line in marks] == [2, 3]
            assert [text.get_text() for text in ax.get_legend().get_texts()].count("health finding") == 1
        finally:
            plt.close(fig)


def test_the_report_lists_the_findings(run_dir: Path, tmp_path: Path) -> None:
    """The "Run health" panel: none for a quiet run; the summary's findings; without a summary (a killed run)
    the health/<monitor>/* metrics' steps."""
    page = write_report([run_dir], tmp_path / "quiet").html.read_text()
    assert "<h2>Run health</h2>\n<p>No run-health findings.</p>" in page
    run = tmp_path / "run"
    shutil.copytree(run_dir, run, ignore=shutil.ignore_patterns("report", "*.png"))
    summary = json.loads((run / "summary.json").read_text())
    finding = {
        "monitor": "entropy_collapse",
        "severity": "critical",
        "signal": "actor/entropy",
        "message": "actor/entropy 0.02 < 0.05",
        "began_at": 1,
        "step": 2,
        "values": {},
        "action": "stop",
    }
    (run / "summary.json").write_text(json.dumps({**summary, "health": [finding]}))
    report = write_report([run], tmp_path / "found")
    page = report.html.read_text()
    cells = "<td>2</td><td>1</td><td>critical</td><td>entropy_collapse</td><td>actor/entropy</td>"
    assert cells + "<td>actor/entropy 0.02 &lt; 0.05</td><td>stop</td>" in page
    assert report.has_data["entropy"]
    (run / "summary.json").unlink()
    records = read_metrics(run)
    for record in records:
        if record["step"] == 2:
            record.update({"health/entropy_collapse/finding": 1.0, "health/entropy_collapse/began_at": 1.0})
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    page = write_report([run], tmp_path / "unsummarised").html.read_text()
    assert "<td>2</td><td>1</td><td>-</td><td>entropy_collapse</td><td>-</td><td>-</td><td>-</td>" in page
