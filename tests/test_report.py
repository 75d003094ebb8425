"""``rlcore report``: the plots and the HTML page of real run directories, one run and two compared."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from rlcore.cli import cli
from rlcore.errors import RLCoreError
from rlcore.testing.runs import make_tiny_task, tiny_run
from rlcore.tracking.report import PANELS, run_names, write_report
from rlcore.tracking.sinks import read_metrics

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path) -> Path:
    """A real two-step GRPO run with the KL loss on (so the KL panel has two curves)."""
    tmp = tmp_path_factory.mktemp("report-run")
    task = make_tiny_task(tmp / "task")
    _, path = tiny_run(
        tmp, tiny_model_dir, task, "algorithm.adv_estimator=grpo", "actor_rollout_ref.actor.use_kl_loss=true"
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
    assert set(panel_captions(page)) == {panel.slug for panel in PANELS}
    assert_png(run_dir / "report" / "report.png", 900, 1000)
    assert_png(run_dir / "reward_curve.png")


def test_report_of_one_run(run_dir: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["report", str(run_dir), "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    out = tmp_path / "out"
    assert f"report: {out / 'index.html'}" in result.output and "no data" not in result.output
    image = assert_png(out / "report.png", 900, 1000)
    assert image.shape[0] > image.shape[1]  # four rows of two panels
    page = (out / "index.html").read_text()
    captions = panel_captions(page)
    assert list(captions) == [panel.slug for panel in PANELS]
    for panel in PANELS:
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
    assert captions["entropy"] == "Entropy (no data)" and captions["reward"].startswith("Reward")
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


def test_run_names_tell_same_named_runs_apart() -> None:
    assert run_names([Path("/r/a/run-1"), Path("/r/b/run-2")]) == ["run-1", "run-2"]
    assert run_names([Path("/r/a/run-1"), Path("/r/b/run-1")]) == ["a/run-1", "b/run-1"]
    assert run_names([Path("/r/x/a/run-1"), Path("/r/y/a/run-1")]) == ["x/a/run-1", "y/a/run-1"]


def test_report_errors(tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(cli, ["report", str(tmp_path / "missing")])
    assert result.exit_code == 2 and "does not exist" in result.output
    (tmp_path / "not-a-run").mkdir()
    result = runner.invoke(cli, ["report", str(tmp_path / "not-a-run")])
    assert result.exit_code == 2 and "not a run directory" in result.output and "metrics.jsonl" in result.output
    (tmp_path / "empty-run").mkdir()
    (tmp_path / "empty-run" / "metrics.jsonl").write_text("")
    with pytest.raises(RLCoreError, match="no step was logged"):
        write_report([tmp_path / "empty-run"])
    with pytest.raises(RLCoreError, match="no run directory"):
        write_report([])
    assert not (tmp_path / "empty-run" / "report").exists()
