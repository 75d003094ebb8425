"""The run-health monitor: rlcore's contract suite, and one fall reported once."""

from rlcore_testkit.contracts import HealthMonitorContract


def rows(scores: list[float]) -> list[dict[str, float]]:
    """One metric row per score, steps from 1."""
    return [{"step": float(step), "critic/score/mean": score} for step, score in enumerate(scores, start=1)]


class TestHealthMonitorContract(HealthMonitorContract):
    """rlcore's behavioural checks for ``trainer.monitors.{{ cookiecutter.hyphenated }}``."""

    component_name = "{{ cookiecutter.hyphenated }}"
    #: the score climbs to 0.8, falls to 0.2 (a finding), recovers and falls again (a second finding)
    firing_rows = rows([0.4, 0.6, 0.8, 0.7, 0.2, 0.1, 0.75, 0.3, 0.3])

    def test_reports_each_fall_once(self, monitor_class, settings, spec) -> None:
        seen = self.run(self.make_monitor(monitor_class, settings), self.firing_rows, spec, firing=True)
        assert [finding.began_at for _, found in seen for finding in found] == [5, 8]
