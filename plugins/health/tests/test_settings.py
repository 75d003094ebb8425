"""The monitors' settings are checked before a run starts: each bad threshold is one line naming its key."""

from __future__ import annotations

from rlcore_testkit.runs import dry_run


def test_bad_thresholds_are_named_before_the_run() -> None:
    """``rlcore run --dry-run`` with a ratio above 1 and a window of 0: both keys named, nothing started."""
    result = dry_run("trainer.monitors.length_blowup.max_clip_ratio=2", "trainer.monitors.kl_spike.window=0")
    assert result.exit_code != 0
    assert "error: trainer.monitors.length_blowup.max_clip_ratio must be a number in [0, 1], got 2" in result.output
    assert "error: trainer.monitors.kl_spike.window must be a positive integer, got 0" in result.output
    assert "nothing was started" in result.output
