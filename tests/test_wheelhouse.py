"""From pip, as a user installs rlcore: every distribution of this checkout is built into a wheelhouse, and
fresh virtual environments that see nothing of the development environment install from it.

The venvs are created without ``--system-site-packages`` and run with ``clean_env`` of ``tests/conftest.py``
(no ``PYTHONPATH``, ``VIRTUAL_ENV`` or ``RLCORE_*``) and a ``PATH`` without this environment's ``bin``. rlcore's own
distributions come from the wheelhouse (``--find-links``; none is published), everything else from the
package index that pip is configured with here (``pip config list``: the same ``HOME`` and ``PIP_*``
variables, so a machine whose CPU torch wheel sits in a local ``find-links`` folder serves it to these
venvs too). The distribution layout under test is described in ``docs/publishing.md`` ("Distributions").

The wheelhouse is the README's (``python tools/wheelhouse.py``), built once per test run by the ``wheelhouse``
fixture of ``tests/venv_fixtures.py``; ``tests/test_template.py`` installs rlcore's and the test kit's wheels
from the same one. The last test is marked ``slow`` (deselect it with ``-m 'not slow'``): minutes on two cores,
most of it building the wheels and installing into a fresh venv; the others take seconds.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tarfile
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from packaging.requirements import Requirement

from rlcore.plugins import normalize_dist_name
from rlcore.tracking.sinks import read_metrics
from tests.venv_fixtures import Wheelhouse, wheelhouse_fixture  # noqa: F401 (the wheelhouse fixture)

ROOT = Path(__file__).resolve().parents[1]
#: every distribution of ``plugins/`` (a folder with a ``pyproject.toml``): the plugins and the test kit
PLUGIN_PROJECTS = sorted(path.parent for path in (ROOT / "plugins").glob("*/pyproject.toml"))
#: never copied along with sources that are built
BUILD_JUNK = shutil.ignore_patterns("__pycache__", "*.egg-info", "build", "dist")
#: the torch that README's commands install first
TORCH = "torch==2.13.0"
#: plugins that take no part in a run and depend on plain rlcore (as trackers do), each with why
LEAN_PLUGINS = {
    "rlcore-plugin-scaffold": "renders the plugin template; the project it makes depends on rlcore[train] itself",
}


def project_table(project: Path) -> dict[str, Any]:
    """The ``[project]`` table of ``project``'s ``pyproject.toml``."""
    return tomllib.loads((project / "pyproject.toml").read_text())["project"]


def copy_sources(project: Path, dest: Path) -> Path:
    """A clean copy of a plugin project under ``dest`` (building in it leaves the checkout untouched)."""
    return Path(shutil.copytree(project, dest / project.name, ignore=BUILD_JUNK))


def fresh_venv(run: Any, path: Path) -> dict[str, str]:
    """Create a venv at ``path`` that sees nothing of this environment; returns the variables to run it with
    (``PATH`` starting with its ``bin``, without this environment's)."""
    run([sys.executable, "-m", "venv", path])
    own_bin = str(Path(sys.prefix) / "bin")
    rest = [entry for entry in os.environ.get("PATH", "").split(os.pathsep) if entry and entry != own_bin]
    return {"PATH": os.pathsep.join([str(path / "bin"), *rest])}


def pip_install(run: Any, venv: Path, env: dict[str, str], *args: Any) -> None:
    """``pip install --no-compile ARGS`` with the venv's own pip (and this machine's pip configuration), as the
    README's first command installs (``--no-compile``: Python compiles a module when it is first imported,
    instead of pip compiling torch's thousands of modules up front)."""
    run([venv / "bin" / "python", "-m", "pip", "install", "--quiet", "--no-compile", *args], env=env)


def installed_rlcore_distributions(run: Any, venv: Path, env: dict[str, str]) -> dict[str, str]:
    """``{distribution: version}`` of the rlcore distributions installed in the venv, from ``pip list``."""
    rows = json.loads(run([venv / "bin" / "python", "-m", "pip", "list", "--format", "json"], env=env).stdout)
    return {
        normalize_dist_name(row["name"]): row["version"]
        for row in rows
        if normalize_dist_name(row["name"]).startswith("rlcore")
    }


def loaded_plugins(run: Any, venv: Path, env: dict[str, str], cwd: Path) -> dict[str, dict[str, Any]]:
    """The venv's ``rlcore plugins --json`` (strict), by plugin name."""
    out = run([venv / "bin" / "rlcore", "plugins", "--json"], cwd=cwd, env={**env, "RLCORE_STRICT_PLUGINS": "1"})
    return {row["name"]: row for row in json.loads(out.stdout)}


def test_every_plugin_depends_on_what_its_default_run_needs() -> None:
    """The layout rule: ``rlcore[train]`` brings the default backend and the bundled task's algorithm, and
    every plugin that takes part in training depends on ``rlcore[train]`` within one compatible range of this
    rlcore; a plugin that only records a run (trackers) or takes no part in one (:data:`LEAN_PLUGINS`) depends on
    plain ``rlcore``."""
    from rlcore.distributions import by_name

    train = [Requirement(text) for text in project_table(ROOT)["optional-dependencies"]["train"]]
    assert {"rlcore-plugin-fsdp", "rlcore-plugin-hf", "rlcore-plugin-grpo", "rlcore-plugin-tasks"} <= {
        normalize_dist_name(req.name) for req in train
    }
    version = project_table(ROOT)["version"]
    for project in PLUGIN_PROJECTS:
        table = project_table(project)
        (core,) = [req for req in map(Requirement, table["dependencies"]) if req.name == "rlcore"]
        if "rlcore" not in table["entry-points"]:  # the test kit: no plugin, no row; it runs rlcore[train]
            assert core.extras == {"train"} and core.specifier.contains(version), f"{project.name}: {core}"
            continue
        row = by_name(normalize_dist_name(table["name"]))
        assert row is not None, f"{project.name}: no row in rlcore.distributions"
        if set(row.components) == {"tracker"} or row.name in LEAN_PLUGINS:
            assert not core.extras, f"{project.name}: needs no training stack, depend on plain rlcore"
        else:
            assert "train" in core.extras, f"{project.name}: depends on {core}, not on rlcore[train]"
        assert core.specifier.contains(version), f"{project.name}: {core} excludes this rlcore ({version})"


def test_plugin_sdist_carries_its_sources_and_tests(tmp_path: Path, run: Any) -> None:
    """What a plugin publishes (the GRPO plugin, the template's model): the sdist has the sources, tests and
    README."""
    source = copy_sources(ROOT / "plugins" / "algo_grpo", tmp_path)
    run([sys.executable, "-m", "build", "--no-isolation", "--sdist", "--outdir", tmp_path / "dist", source])
    (sdist,) = (tmp_path / "dist").glob("*.tar.gz")
    with tarfile.open(sdist) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    assert {"pyproject.toml", "README.md", "src/rlcore_plugin_grpo/hooks.py", "tests/test_grpo.py"} <= names


def test_lean_core_names_the_pip_line_of_each_missing_component(
    tmp_path: Path, run: Any, wheelhouse: Wheelhouse
) -> None:
    """Plain ``pip install rlcore`` (no extras): the CLI works, no plugin is there, and what a run needs that is
    missing is named with the ``pip install`` line that provides it."""
    venv = tmp_path / "venv"
    env = fresh_venv(run, venv)
    pip_install(run, venv, env, "--find-links", wheelhouse.folder, "rlcore")
    assert installed_rlcore_distributions(run, venv, env) == {"rlcore": wheelhouse.wheel("rlcore").name.split("-")[1]}
    assert all(row["builtin"] for row in loaded_plugins(run, venv, env, tmp_path).values())
    rlcore = venv / "bin" / "rlcore"
    for args, line in [
        ((), "pip install rlcore-plugin-tasks"),
        ((), "pip install rlcore-plugin-hf"),
        (("--preset", "dapo"), "pip install rlcore-plugin-dapo"),
        (("algorithm.adv_estimator=grpo",), "pip install rlcore-plugin-grpo"),
        (("algorithm.adv_estimator=rloo",), "pip install rlcore-plugin-rloo"),
    ]:
        result = run([rlcore, "run", "--dry-run", *args], cwd=tmp_path, env=env, check=False)
        assert result.returncode != 0 and line in result.stderr, result.stderr
    for command, dist in ((["sft"], "sft"), (["data", "arith-sft"], "sft"), (["new", "plugin"], "scaffold")):
        result = run([rlcore, *command], cwd=tmp_path, env=env, check=False)
        assert result.returncode == 2 and f"not installed: pip install rlcore-plugin-{dist}" in result.stderr, (
            result.stderr
        )


@pytest.mark.slow
def test_pip_install_dapo_alone_trains_the_bundled_task(tmp_path: Path, run: Any, wheelhouse: Wheelhouse) -> None:
    """The README's pip door: ``python tools/wheelhouse.py`` builds a wheel of every distribution of the
    checkout; a fresh venv with torch installed first, then only ``pip install --find-links wheelhouse
    rlcore-plugin-dapo``; ``rlcore run --preset dapo`` trains two steps of the bundled task."""
    house = wheelhouse.folder
    assert f"wheels in {house}: pip install --find-links {house} rlcore-plugin-<name>" in wheelhouse.stdout
    names = {normalize_dist_name(project_table(project)["name"]) for project in [ROOT, *PLUGIN_PROJECTS]}
    assert {normalize_dist_name(wheel.name.split("-")[0]) for wheel in house.glob("*.whl")} == names

    venv = tmp_path / "venv"
    env = fresh_venv(run, venv)
    pip_install(run, venv, env, TORCH)
    pip_install(run, venv, env, "--find-links", house, "rlcore-plugin-dapo")
    dapo_run = {
        "rlcore",
        "rlcore-plugin-dapo",
        "rlcore-plugin-grpo",
        "rlcore-plugin-fsdp",
        "rlcore-plugin-hf",
        "rlcore-plugin-tasks",
        "rlcore-plugin-agents",
        "rlcore-plugin-report",
        "rlcore-plugin-health",
    }
    installed = installed_rlcore_distributions(run, venv, env)
    assert set(installed) == dapo_run

    work = tmp_path / "work"
    work.mkdir()
    plugins = {name: row for name, row in loaded_plugins(run, venv, env, work).items() if not row["builtin"]}
    assert {name: row["status"] for name, row in plugins.items()} == dict.fromkeys(dapo_run - {"rlcore"}, "ok")

    rlcore = venv / "bin" / "rlcore"
    missing = run([rlcore, "run", "--dry-run", "actor_rollout_ref.rollout.name=vllm"], cwd=work, env=env, check=False)
    assert "pip install 'rlcore-plugin-vllm[cpu]'" in missing.stderr, missing.stderr

    run_env = {**env, "RLCORE_STRICT_PLUGINS": "1", "RLCORE_CACHE": str(tmp_path / "cache")}
    run(
        [
            rlcore,
            "run",
            "--preset",
            "dapo",
            "trainer.total_training_steps=2",
            "trainer.val_before_train=false",
            "trainer.progress_bar=false",
            "data.train_batch_size=8",
        ],
        cwd=work,
        env=run_env,
    )
    (run_dir,) = (work / "outputs").glob("*/*")
    steps = [row["training/global_step"] for row in read_metrics(run_dir) if "actor/pg_loss" in row]
    assert steps == [1, 2]
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert config["reward_model"]["reward_manager"] == "dapo"
    assert "dapo-groups" in config["algorithm"]["batch_filters"]
    versions = {
        name: row["version"]
        for name, row in json.loads((run_dir / "plugins.json").read_text()).items()
        if not row["builtin"]
    }
    assert versions == {name: installed[name] for name in dapo_run - {"rlcore"}}
