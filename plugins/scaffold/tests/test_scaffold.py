"""The scaffold plugin without rendering: its hooks add ``rlcore new plugin`` (and import no cookiecutter), the
``key=value`` arguments are checked, and the next steps it prints. Rendering, installing and testing generated
projects is rlcore's ``tests/test_template.py``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner
from rlcore_plugin_scaffold import hooks
from rlcore_plugin_scaffold.scaffold import ScaffoldError, next_steps, parse_assignments, template_variables


def test_the_hooks_add_new_plugin_with_its_options() -> None:
    """``register_commands`` adds the ``new`` group; ``rlcore new plugin --help`` shows its options."""
    cli = click.Group("rlcore")
    hooks.register_commands(cli=cli)
    result = CliRunner().invoke(cli, ["new", "plugin", "--help"])
    assert result.exit_code == 0, result.output
    assert "Create a plugin distribution, rlcore-plugin-NAME" in result.output
    assert "--no-input" in result.output and "--output-dir" in result.output


def test_importing_the_hooks_imports_no_cookiecutter() -> None:
    """The command line's start-up imports the hooks; cookiecutter is imported only when the command runs."""
    code = "import sys, rlcore_plugin_scaffold.hooks; print('cookiecutter' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"


def test_switches_become_booleans_and_other_values_stay_text() -> None:
    values = parse_assignments(["plugin_name=demo", "policy_loss=Yes", "tracker=0"], template_variables())
    assert values == {"plugin_name": "demo", "policy_loss": True, "tracker": False}


@pytest.mark.parametrize(
    ("arg", "message"),
    [
        ("policy_loss=maybe", "policy_loss must be yes or no, got 'maybe'"),
        ("polcy_loss=yes", "unknown template variable 'polcy_loss'. Did you mean 'policy_loss'?"),
        ("plugin_name", "expected key=value, got 'plugin_name'"),
    ],
)
def test_a_bad_argument_is_named(arg: str, message: str) -> None:
    with pytest.raises(ScaffoldError, match=message.replace("?", r"\?")):
        parse_assignments([arg], template_variables())


def test_next_steps_use_a_relative_path_when_possible(tmp_path: Path) -> None:
    """``cd`` is relative to the current directory when the project is below it, absolute otherwise."""
    project = tmp_path / "out dir" / "rlcore-plugin-x"
    assert next_steps(project, tmp_path)[0] == "cd 'out dir/rlcore-plugin-x'"
    assert next_steps(project, tmp_path / "elsewhere") == [f"cd '{project}'", "pip install -e '.[test]'", "pytest"]
