"""What the README and docs say that the code decides is checked here, so that it cannot drift: the torch line
(one text, in the README and in every generated plugin's README), the plugin count of the example output,
the template's dependency line on the publishing page, the first command's requirements file, and the length of
the training step the README points to."""

from __future__ import annotations

import inspect
import re
import tomllib
from pathlib import Path

import pytest
from rlcore_plugin_scaffold.scaffold import PLUGIN_TEMPLATE, new_plugin

from rlcore.controller.trainer import Trainer

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: the torch paragraph, written once: the template includes it, the README carries it word for word
TORCH_TEXT = PLUGIN_TEMPLATE / "templates" / "install-torch.md"


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A plugin rendered from the template with its defaults."""
    return new_plugin({"plugin_name": "claims"}, no_input=True, output_dir=tmp_path_factory.mktemp("template"))


def test_the_torch_line_is_one_text_in_the_readme_and_the_template(rendered: Path) -> None:
    """The README and a generated plugin's README give the same torch paragraph: PyTorch's CPU index on a
    machine without a GPU, the CUDA build on a GPU machine."""
    text = TORCH_TEXT.read_text()
    assert "pip install torch --index-url https://download.pytorch.org/whl/cpu" in text and "GPU machine" in text
    assert text in (ROOT / "README.md").read_text()
    assert text in (rendered / "README.md").read_text()


def test_the_plugin_count_of_the_example_output_is_the_bundled_plugins() -> None:
    """``plugins: N installed`` in a page's example output is the number of plugins the development install
    has: one per ``rlcore`` entry point of the bundled projects (the test kit has none)."""
    entry_points = sum(
        len(tomllib.loads(path.read_text())["project"]["entry-points"].get("rlcore", {}))
        for path in (ROOT / "plugins").glob("*/pyproject.toml")
    )
    shown = {
        (page.name, int(count))
        for page in PAGES
        for count in re.findall(r"^plugins: (\d+) installed", page.read_text(), re.M)
    }
    assert shown, "no page shows the plugin line"
    assert {count for _, count in shown} == {entry_points}, shown


def test_the_publishing_page_shows_the_templates_dependency_line(rendered: Path) -> None:
    """docs/publishing.md's layout of a generated project gives the dependency the template writes."""
    (dependency, *_) = tomllib.loads((rendered / "pyproject.toml").read_text())["project"]["dependencies"]
    assert f'dependencies = ["{dependency}"]' in (ROOT / "docs" / "publishing.md").read_text()


def test_the_first_command_installs_what_the_default_run_needs() -> None:
    """The README's first command installs ``requirements-run.txt``: the core with ``rlcore[train]``, the FSDP
    backend, the HF rollout engine, GRPO, the bundled tasks, multi-turn rollouts (the bundled tool task's), the
    report and the run-health monitors (what ``rlcore[train]`` depends on), and nothing else."""
    readme = (ROOT / "README.md").read_text()
    assert "pip install --no-compile -r requirements-run.txt && rlcore run\n" in readme
    lines = [line for line in (ROOT / "requirements-run.txt").read_text().splitlines() if not line.startswith("#")]
    assert [line for line in lines if line] == [
        "-e .[train]",
        "-e ./plugins/backend_fsdp",
        "-e ./plugins/rollout_hf",
        "-e ./plugins/algo_grpo",
        "-e ./plugins/tasks",
        "-e ./plugins/agents",
        "-e ./plugins/report",
        "-e ./plugins/health",
    ]
    train = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["train"]
    assert {req.split(">")[0] for req in train if req.startswith("rlcore-plugin-")} == {
        "rlcore-plugin-fsdp",
        "rlcore-plugin-hf",
        "rlcore-plugin-grpo",
        "rlcore-plugin-tasks",
        "rlcore-plugin-agents",
        "rlcore-plugin-report",
        "rlcore-plugin-health",
    }


def test_the_training_step_is_at_most_fifty_lines() -> None:
    """The README's "one plain function of at most fifty lines": ``Trainer.train_step`` from its ``def`` to its
    last line, docstring included, is at most 50 lines (its stages are the methods beside it)."""
    assert "`train_step` in\n[core/rlcore/controller/trainer.py]" in (ROOT / "README.md").read_text()
    assert "one plain function of at most fifty lines" in (ROOT / "README.md").read_text()
    lines, _ = inspect.getsourcelines(Trainer.train_step)
    assert len(lines) <= 50, f"Trainer.train_step is {len(lines)} lines; move the new work into a stage method"
