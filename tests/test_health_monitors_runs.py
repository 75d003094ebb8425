"""The built-in run-health monitors (rlcore-plugin-health) on real runs of the bundled task: each catches the
fault it names, and none speaks on the default run (issue 44's "done when"; docs/health.md's evidence column).

Each scenario is one ``rlcore run`` command (``command_once``: run once per pytest run, in an empty folder, as a
user runs it), shared by the assertions about it; the default run is the one tests/test_default_run.py checks.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rlcore.tracking.sinks import read_metrics

#: a reward function with a bug: NaN for every odd answer
NAN_REWARD = '''
import math
import re


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    """1 for the right sum; NaN when the answer is odd (a scorer bug on some rows)."""
    match = re.search(r"-?\\d+", solution_str)
    if match is None:
        return 0.0
    if int(match.group()) % 2:
        return math.nan
    return 1.0 if match.group() == str(ground_truth).strip() else 0.0
'''


def run_of(ran: Any) -> tuple[Path, list[dict[str, Any]], dict[str, Any]]:
    """The run directory, metric rows and summary of a ``command_once`` run of the bundled task."""
    (run_dir,) = (ran.folder / "outputs" / "rlcore-default").glob("arith-*")
    return run_dir, read_metrics(run_dir / "metrics.jsonl"), json.loads((run_dir / "summary.json").read_text())


def findings_of(summary: dict[str, Any], monitor: str) -> list[dict[str, Any]]:
    """The findings of ``monitor`` in ``summary.json``'s ``"health"`` list."""
    return [finding for finding in summary.get("health", []) if finding["monitor"] == monitor]


def test_reward_loophole_is_stopped_before_validation_falls_by_a_tenth(command_once: Any) -> None:
    """The demo preset ``reward-loophole`` (a reward paying answers that overshoot the sum): reward_hacking
    reports while the validation reward is still within 0.1 of its best so far, and its action ``stop`` ends
    the run there with a non-zero exit status, the finding named in the console summary."""
    ran = command_once("rlcore run --preset reward-loophole")
    assert ran.returncode != 0, ran.output[-3000:]
    run_dir, rows, summary = run_of(ran)
    (finding,) = findings_of(summary, "reward_hacking")
    found_at = finding["step"]
    val_key = "val-core/rlcore/arith/reward/mean@8"  # the preset validates 8 sampled answers per prompt
    val = [(row["step"], row[val_key]) for row in rows if row.get(val_key) is not None]
    best = max(value for step, value in val if step <= found_at)
    assert all(value > best - 0.1 for step, value in val if step <= found_at), (found_at, val)
    assert rows[-1]["step"] == found_at, "the run went on after the stop"
    assert rows[-1]["health/reward_hacking/finding"] == 1
    assert f"health: [warning] reward_hacking: {finding['message']}" in ran.output
    assert f"run health stopped the run at step {found_at}: [warning] reward_hacking: " in ran.output


def test_a_learning_rate_100x_too_high_trips_a_spike_monitor(command_once: Any) -> None:
    """actor.optim.lr 3e-3 (the bundled task's 3e-5 x 100): the gradient-norm or KL monitor reports (the
    first step's second mini-batch moves the policy by a KL of ~2.6 per token, over kl_spike's ceiling), and the
    policy it leaves collapses (entropy 0.52 -> ~0.03: entropy_collapse at its third collapsed step)."""
    ran = command_once("rlcore run actor_rollout_ref.actor.optim.lr=3e-3 trainer.total_training_steps=4")
    _, _, summary = run_of(ran)
    spikes = findings_of(summary, "grad_norm_spike") + findings_of(summary, "kl_spike")
    assert spikes, summary.get("health")
    assert all(finding["severity"] == "critical" for finding in spikes)
    (collapse,) = findings_of(summary, "entropy_collapse")
    assert (collapse["began_at"], collapse["step"]) == (2, 4)


def test_a_too_small_length_limit_trips_length_blowup(command_once: Any) -> None:
    """data.max_response_length=1 (answers need 2-3 tokens): every response is cut, length_blowup reports at
    its third step, naming response_length/clip_ratio."""
    ran = command_once("rlcore run data.max_response_length=1 trainer.total_training_steps=5 trainer.test_freq=-1")
    _, _, summary = run_of(ran)
    (finding,) = findings_of(summary, "length_blowup")
    assert finding["signal"] == "response_length/clip_ratio"
    assert (finding["began_at"], finding["step"]) == (1, 3)


def test_a_reward_returning_nan_trips_nonfinite(command_once: Any, tmp_path: Path) -> None:
    """A reward file returning NaN on some rows (odd answers) (scored 0 and counted in reward/scorer_nan by the reward
    manager): the nonfinite monitor reports at the first step, naming the counter."""
    reward = tmp_path / "nan_reward.py"
    reward.write_text(NAN_REWARD)
    ran = command_once(
        f"rlcore run custom_reward_function.path={reward} trainer.total_training_steps=3 trainer.test_freq=-1"
    )
    _, _, summary = run_of(ran)
    (finding,) = findings_of(summary, "nonfinite")
    assert finding["signal"] == "reward/scorer_nan" and finding["began_at"] == 1


def test_the_default_run_is_quiet(command_once: Any) -> None:
    """The bundled default run (40 steps, every monitor on) gives no finding: no ``health/*`` metric, an empty
    ``"health"`` list in summary.json, no ``health:`` console line.

    Last in the module: ``tests/test_default_run.py`` asks for the same run first thing, so when the two modules
    start together on the two xdist workers, this one reaches it after its own runs, when it is done, instead of
    one worker waiting on the other's run."""
    ran = command_once("rlcore run")
    assert ran.returncode == 0, ran.output[-3000:]
    _, rows, summary = run_of(ran)
    assert summary.get("health") == []
    assert [key for row in rows for key in row if key.startswith("health/")] == []
    assert "health: [" not in ran.output
