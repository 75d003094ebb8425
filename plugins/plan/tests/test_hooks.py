"""The plan plugin's hooks: the three plan lines of ``rlcore run --dry-run`` (and none for a real run), and
``rlcore plan`` on the bundled task."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner
from rlcore_plugin_plan import hooks
from rlcore_testkit.runs import dry_run

from rlcore import load_plugins
from rlcore.cli import cli, resolved_config


@pytest.fixture(scope="module")
def rlcore_cli() -> click.Group:
    """rlcore's command line with the plugins' sub-commands (``rlcore plan`` among them), as the ``rlcore``
    script builds it."""
    load_plugins().add_commands(cli)
    return cli


def test_the_dry_run_prints_the_plan_and_a_real_run_does_not() -> None:
    """The bundled task's dry run prints the short plan on the CPU; the hook gives a real run no lines."""
    result = dry_run()
    assert result.exit_code == 0, result.output
    lines = [line for line in result.output.splitlines() if line.startswith(("plan (", "step time", "verdict"))]
    assert [line.split(" ")[0] for line in lines] == ["plan", "step", "verdict:"], result.output
    assert lines[0].startswith("plan (cpu, `rlcore plan` for details): peak per rank rollout ")
    assert hooks.plan_lines(config=resolved_config((), ()), dry_run=False) is None


def test_rlcore_plan_of_the_bundled_task(rlcore_cli: click.Group) -> None:
    """``rlcore plan --gpu cpu`` (the bundled task) prints the phases' table and the verdict."""
    result = CliRunner().invoke(rlcore_cli, ["plan", "--gpu", "cpu"])
    assert result.exit_code == 0, result.output
    out = result.output.splitlines()
    assert out[0].startswith("plan: ") and out[1].startswith("phase ")
    assert {line.split()[0] for line in out[2:] if line[:1].isalpha()} >= {"rollout", "old_log_prob", "actor_update"}
    assert out[-1].startswith("verdict: fits")


@pytest.mark.parametrize(
    ("override", "error"),
    [
        ("trainer.n_gpus_per_node=0", "trainer.n_gpus_per_node must be a positive integer, got 0"),
        ("trainer.nnodes=0", "trainer.nnodes must be a positive integer, got 0"),
    ],
)
def test_a_config_the_checks_refuse_is_their_error_not_the_planners(override: str, error: str) -> None:
    """The plan lines are made before the config's problems are raised: a config that the checks refuse (here
    with a world size of 0, which the planner would divide by) fails with the checks' one-line error."""
    result = dry_run(override)
    assert result.exit_code == 2, (result.output, result.exception)
    assert f"error: {error}\n" in result.output
