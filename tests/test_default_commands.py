"""The bundled task's commands as a new user runs them, shortened: the output read from a pipe (one line per
step, no third-party noise), presets named in the output, the run directory, ``summary.json`` and the
report, ``rlcore sft``'s own summary and report, a repeated command that starts afresh, and no run directory
left by a start-up error. The runs start from the shipped model, so none of them builds one.

The first test runs the installed command in a fresh process (what a log file gets from it); the others check
what the commands do, so they run the same command line in this process (:func:`rlcore_here`, click's test
runner), without a new interpreter's imports each time.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from rlcore_plugin_report.report import RL_PANELS, SFT_PANELS
from rlcore_plugin_sft.run import run_sft

from rlcore import load_plugins
from rlcore.cli import cli

#: a short run of the bundled task: 8 prompts per step, two steps, validated after the second
SHORT = ("trainer.total_training_steps=2", "trainer.test_freq=2", "data.train_batch_size=8")


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bundled task's cache (its parquet files), shared by the module's runs."""
    return tmp_path_factory.mktemp("rlcore-cache")


def rlcore(cwd: Path, cache: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``rlcore ARGS`` in a fresh process whose output is a pipe, as in a log file."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RLCORE_", "DS_"))}
    env["RLCORE_CACHE"] = str(cache)
    return subprocess.run(
        [sys.executable, "-m", "rlcore", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=900
    )


def rlcore_here(monkeypatch: pytest.MonkeyPatch, cwd: Path, cache: Path, *args: str) -> Result:
    """``rlcore ARGS`` run in this process by click's test runner, in ``cwd``, with the environment that
    :func:`rlcore` gives a fresh process (no ``RLCORE_*`` or ``DS_*`` variables but ``RLCORE_CACHE``); the
    commands plugins add (``rlcore sft``) are added first, as the ``rlcore`` script does."""
    for name in [k for k in os.environ if k.startswith(("RLCORE_", "DS_"))]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("RLCORE_CACHE", str(cache))
    monkeypatch.chdir(cwd)
    load_plugins().add_commands(cli)
    return CliRunner().invoke(cli, list(args), prog_name="rlcore", catch_exceptions=False)


def captions(page: str) -> dict[str, str]:
    """``{panel slug: caption}`` of a report page."""
    found = re.findall(r'<figure data-panel="([^"]+)"><figcaption>(.*?)</figcaption>', page)
    return {slug: re.sub(r"<[^>]+>", "", caption) for slug, caption in found}


def test_preset_run_in_a_log_names_its_presets_everywhere(tmp_path: Path, cache: Path) -> None:
    """``rlcore run --preset dapo`` with its output piped: the first line names both presets, then a plugin
    count, one short line per step and the validation announced — no DeepSpeed notice; the run directory is
    ``arith-dapo-…``; ``summary.json`` lists the presets; the report shows them with the keys each set."""
    result = rlcore(tmp_path, cache, "run", "--preset", "dapo", *SHORT)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert (
        lines[0] == "No config file or data.train_files given: training the bundled CPU task (presets arith-cpu, dapo)."
    )
    assert re.fullmatch(r"plugins: \d+ installed \(rlcore plugins lists them\)", lines[1]), lines[1]
    assert "Setting accelerator" not in result.stdout + result.stderr
    steps = [line for line in lines if line.startswith("step ")]
    assert [line.split(",")[0] for line in steps] == ["step 0/2", "step 1/2", "step 2/2"], steps
    assert re.fullmatch(r"step 1/2, reward [\d.]+, val [\d.]+, elapsed \d+s, ETA \d+s", steps[1]), steps[1]
    assert lines.index("validating after step 2 ...") < lines.index(steps[2])
    assert all(len(line) < 120 for line in steps)

    (run_dir,) = (tmp_path / "outputs" / "rlcore-default").glob("arith-dapo-*")
    assert f"model:         {(run_dir / 'model').relative_to(tmp_path)} (Hugging Face format)" in lines
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {p.name for p in (run_dir / "model").iterdir()}
    assert not any(line.startswith("checkpoint:") for line in lines), "save_freq is not set: no checkpoint line"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["presets"] == ["arith-cpu", "dapo"]
    presets = {entry["name"]: entry["keys"] for entry in json.loads((run_dir / "presets.json").read_text())}
    assert presets["dapo"]["actor_rollout_ref.actor.clip_ratio_high"] == {"preset": 0.28, "final": 0.28}
    assert presets["arith-cpu"]["trainer.experiment_name"] == {"preset": "arith-grpo", "final": "arith-dapo"}
    page = (run_dir / "report" / "index.html").read_text()
    assert "<td><code>presets</code></td><td>arith-cpu, dapo</td>" in page
    assert re.search(r"<td>dapo</td><td><code>actor_rollout_ref.actor.clip_ratio_high</code></td><td>0.28</td>", page)
    assert "<td><code>reward_model.reward_manager</code></td><td>dapo</td>" in page
    assert captions(page)["reward"] == "Training reward (0/1 rewards: share correct)"


def test_repeated_run_with_a_finished_checkpoint_starts_afresh(
    tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run with ``save_freq`` names its newest checkpoint at the end; the same command again, its checkpoint
    having finished all its steps, starts a fresh run and says so; told to resume that checkpoint, it stops
    before creating a run directory."""
    args = ("run", "trainer.total_training_steps=1", "trainer.save_freq=1", "trainer.val_before_train=false")
    first = rlcore_here(monkeypatch, tmp_path, cache, *args, "data.train_batch_size=8")
    assert first.exit_code == 0, first.stderr[-3000:]
    assert "checkpoint:    checkpoints/rlcore-default/arith-grpo/global_step_1" in first.stdout.splitlines()
    again = rlcore_here(monkeypatch, tmp_path, cache, *args, "data.train_batch_size=8")
    assert again.exit_code == 0, again.stderr[-3000:]
    assert (
        "global_step_1, is at step 1 of the run's 1: nothing is left to train from it, so this is a fresh run"
        in again.stdout
    )
    runs = tmp_path / "outputs" / "rlcore-default"
    assert len(list(runs.glob("arith-grpo-*"))) == 2
    checkpoint = tmp_path / "checkpoints" / "rlcore-default" / "arith-grpo" / "global_step_1"
    told = rlcore_here(
        monkeypatch, tmp_path, cache, *args, "trainer.resume_mode=resume_path", f"trainer.resume_from_path={checkpoint}"
    )
    assert told.exit_code == 2 and "nothing left to train" in told.stderr, told.stderr[-2000:]
    assert len(list(runs.glob("arith-grpo-*"))) == 2 and "report" not in told.stdout


def test_sft_twice_reports_like_sft(
    tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``rlcore sft`` (shortened) prints its loss and greedy-accuracy trends and the checkpoint, and its
    report has SFT's panels, each with data; the same command again starts a fresh run instead of failing,
    saying why; told to resume the finished checkpoint it stops before creating a run directory."""
    monkeypatch.setenv("RLCORE_CACHE", str(cache))
    monkeypatch.chdir(tmp_path)
    args = ["trainer.total_training_steps=4", "trainer.test_freq=2", "trainer.progress_bar=false"]
    last = run_sft([], args)
    out = capsys.readouterr().out
    assert re.search(r"^val/loss: [\d.]+ \(step 0\) -> [\d.]+ \(step 4\)$", out, re.M), out
    assert re.search(r"^val/greedy_acc: [\d.]+ \(step 0\) -> [\d.]+ \(step 4\)$", out, re.M), out
    assert re.search(r"^checkpoint: +\S+global_step_4 \(model: \S+global_step_4/actor/huggingface\)$", out, re.M)
    assert 0.0 <= last["val/greedy_acc"] <= 1.0 and last["val/loss"] > 0
    runs = tmp_path / "outputs" / "rlcore-default"
    (run_dir,) = runs.glob("arith-sft-*")
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["kind"] == "sft" and set(summary["trends"]) == {"val/loss", "val/greedy_acc"}
    assert summary["trends"]["val/greedy_acc"]["first_step"] == 0 and summary["trends"]["val/loss"]["last_step"] == 4
    page = (run_dir / "report" / "index.html").read_text()
    assert captions(page) == {panel.slug: panel.title for panel in SFT_PANELS}  # every panel has data
    assert not {panel.slug for panel in RL_PANELS} - {panel.slug for panel in SFT_PANELS} & set(captions(page))
    assert "<td><code>model.partial_pretrain</code></td>" in page

    run_sft([], args)
    assert "global_step_4, is at step 4 of the run's 4: nothing is left to train from it" in capsys.readouterr().out
    assert len(list(runs.glob("arith-sft-*"))) == 2

    checkpoint = tmp_path / "checkpoints" / "rlcore-default" / "arith-sft" / "global_step_4"
    told = rlcore_here(
        monkeypatch,
        tmp_path,
        cache,
        "sft",
        *args,
        "trainer.resume_mode=resume_path",
        f"trainer.resume_from_path={checkpoint}",
    )
    assert told.exit_code == 2 and "nothing left to train" in told.stderr, told.stderr[-2000:]
    assert len(list(runs.glob("arith-sft-*"))) == 2 and "report" not in told.stdout


def test_the_readme_sft_to_rl_command_after_a_checkpointed_run_trains_from_the_sft_weights(
    tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """README "From SFT to RL", after a default run that saved an unfinished checkpoint in the same folder: the
    RL run starts from the SFT model (step 1) instead of resuming the other run's checkpoint and says which
    parts differ; saving nothing itself, it leaves that checkpoint where it is."""
    first = rlcore_here(
        monkeypatch, tmp_path, cache, "run", "trainer.total_training_steps=1", "trainer.save_freq=1", *SHORT[2:]
    )
    assert first.exit_code == 0, first.stderr[-3000:]
    grpo_folder = tmp_path / "checkpoints" / "rlcore-default" / "arith-grpo"
    assert (grpo_folder / "global_step_1").is_dir()
    sft = rlcore_here(monkeypatch, tmp_path, cache, "sft", "trainer.total_training_steps=2", "trainer.test_freq=-1")
    assert sft.exit_code == 0, sft.stderr[-3000:]
    exported = tmp_path / "checkpoints" / "rlcore-default" / "arith-sft" / "global_step_2" / "actor" / "huggingface"
    rl = rlcore_here(
        monkeypatch, tmp_path, cache, "run", f"actor_rollout_ref.model.path={exported.relative_to(tmp_path)}", *SHORT
    )
    assert rl.exit_code == 0, rl.stderr[-3000:]
    assert "resumed from" not in rl.stdout
    assert f"not resuming {grpo_folder / 'global_step_1'}, another run's: model (" in rl.stdout
    assert f"-> {exported})" in rl.stdout and "this is a fresh run" in rl.stdout
    assert re.search(r"^step 1/2, reward", rl.stdout, re.M), rl.stdout
    assert (grpo_folder / "global_step_1").is_dir() and not (grpo_folder / "previous").exists()
