"""The plugin template: rendered, installed and tested as a plugin author would, for every component kind.

Each kind alone, then all of them together, is rendered with ``rlcore new plugin --no-input`` and checked (exact
file set, pyproject parsed with tomllib, workflows parsed as YAML, every module compiles). The single-kind projects
are pip-installed together with rlcore's and the test kit's wheels (from the README's wheelhouse, built once per
test run: ``tests/venv_fixtures.py``) (the generated tests import ``rlcore_testkit``)
into one fresh venv beside this environment, each listed by that venv's ``rlcore plugins --json`` with exactly its
component, and their generated tests are run there by one pytest process — each project's must pass. The project with every kind is installed alone into its own venv, listed, its
generated tests pass, and ``rlcore run --preset`` trains two CPU steps through the generated components. The
template's checks of bad values, the ``cookiecutter/`` pointer at the repository root and ``rlcore new plugin`` from
installed wheels (rlcore's and rlcore-plugin-scaffold's, which ships the template) are tested too. ``HOME`` points at a temporary directory in every render, so a developer's
``~/.cookiecutterrc`` cannot change the output.

The renders run ``rlcore``'s console-script entry point (:func:`rlcore.cli.main`: plugin loading, the
scaffold's command, the exit status) in this process: the template's hooks still run as child processes, as
cookiecutter runs them, and only the interpreter start of each render is saved. ``rlcore new plugin`` from the
wheels installed in a venv, and plain ``cookiecutter``, run as commands.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from packaging.specifiers import SpecifierSet
from rlcore_plugin_scaffold.scaffold import default_values, template_variables

import rlcore
from rlcore.api import API_VERSION, set_plugin_manager
from rlcore.api.kinds import KINDS
from rlcore.cli import main
from tests.venv_fixtures import Wheelhouse, wheelhouse_fixture  # noqa: F401 (the wheelhouse fixture)

ROOT = Path(__file__).resolve().parents[1]
#: files every generated project has (``{pkg}``: the package name)
COMMON_FILES = (
    ".github/workflows/publish.yml",
    ".github/workflows/test.yml",
    ".gitignore",
    "LICENSE",
    "README.md",
    "pyproject.toml",
    "src/{pkg}/__init__.py",
    "src/{pkg}/hooks.py",
    "tests/test_plugin.py",
)
#: the running rlcore's major.minor, the template's default ``rlcore_min_version``
MIN_VERSION = ".".join(rlcore.__version__.split(".")[:2])
#: the plugin API range the template declares by default
API_RANGE = f">={API_VERSION.split('.')[0]},<{int(API_VERSION.split('.')[0]) + 1}"


def compatible_range(minimum: str) -> str:
    """The SemVer-compatible range from ``minimum``: up to the next minor while 0.x, the next major after."""
    major, minor = (int(part) for part in minimum.split(".")[:2])
    return f">={minimum},<{f'0.{minor + 1}' if major == 0 else major + 1}"


def expected_files(kinds: tuple[str, ...], pkg: str) -> set[str]:
    """The relative paths of a project generated with ``kinds`` switched on."""
    per_kind = {path for kind in kinds for path in (f"src/{pkg}/{kind}.py", f"tests/test_{kind}.py")}
    return {path.format(pkg=pkg) for path in COMMON_FILES} | per_kind


def project_files(project: Path) -> set[str]:
    """The relative paths of every file under ``project``."""
    return {str(path.relative_to(project)) for path in project.rglob("*") if path.is_file()}


def kind_slug(kind: str) -> str:
    """A component kind as a name part: ``advantage_estimator`` -> ``advantage-estimator``."""
    return kind.replace("_", "-")


def switches(kinds: tuple[str, ...]) -> list[str]:
    """``kind=yes|no`` for every component kind."""
    return [f"{kind}={'yes' if kind in kinds else 'no'}" for kind in KINDS]


@dataclass(frozen=True)
class Said:
    """What ``rlcore new plugin`` ended with: its exit status and what it printed on standard output."""

    returncode: int
    stdout: str


def rlcore_new(tmp_path: Path, *values: str, check: bool = True) -> Said:
    """``rlcore new plugin --no-input --output-dir <tmp>/out VALUES`` through the console script's entry point
    (:func:`rlcore.cli.main`) in this process, run in ``tmp_path`` with ``HOME`` in it, no ``RLCORE_*``
    variables and the plugins loaded afresh (the process-wide manager is put back afterwards); with ``check``, a
    non-zero exit status fails the test. Standard error is left to the test's capture (``capfd`` reads it, the
    template hooks' output included: they run as child processes)."""
    (tmp_path / "home").mkdir(exist_ok=True)
    argv = ["rlcore", "new", "plugin", "--no-input", "--output-dir", str(tmp_path / "out"), *values]
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(io.StringIO()) as out:
        for key in [key for key in os.environ if key.startswith("RLCORE_")]:
            patch.delenv(key)
        patch.setenv("HOME", str(tmp_path / "home"))
        patch.chdir(tmp_path)
        patch.setattr(sys, "argv", argv)
        previous = set_plugin_manager(None)  # plugins load afresh, in this environment, as in a new process
        try:
            main()
        except SystemExit as exc:  # click's standalone mode always ends with sys.exit
            code = exc.code
        else:
            code = 0
        finally:
            set_plugin_manager(previous)
    said = Said(code if isinstance(code, int) else int(code is not None), out.getvalue())
    if check and said.returncode != 0:
        pytest.fail(f"{' '.join(argv)} exited {said.returncode}\n{said.stdout}")
    return said


#: the plugin distributions ``rlcore[train]`` brings (FSDP, the HF engine, GRPO, the tasks, the report): what a
#: generated project's contract suites run against, as they would in its own CI
TRAIN_PLUGINS = [
    req.split(">")[0]
    for req in tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]["train"]
    if req.startswith("rlcore-plugin-")
]


def plugin_env(*dists: str) -> dict[str, str]:
    """Strict plugin loading, as in the generated CI, of ``dists`` and the plugins of ``rlcore[train]`` only: the
    other plugins of this development environment (visible in the test venvs) cannot make the generated tests
    fail."""
    return {"RLCORE_STRICT_PLUGINS": "1", "RLCORE_LOAD_PLUGINS": ",".join([*dists, *TRAIN_PLUGINS])}


def listed_components(run: Any, rlcore_bin: Path, dist: str) -> set[tuple[str, str]]:
    """``(kind, name)`` of ``dist``'s components in ``rlcore plugins --json``, after asserting it is ``ok``."""
    rows = json.loads(run([rlcore_bin, "plugins", "--json"], env=plugin_env(dist)).stdout)
    (row,) = [row for row in rows if row["name"] == dist]
    assert row["status"] == "ok", row["error"]
    assert row["api"] == API_RANGE
    return {(component["kind"], component["name"]) for component in row["components"]}


def test_template_default_range_is_the_running_rlcore() -> None:
    """The default rlcore range is the current one, and so is the default plugin API range, in the template's
    own file too (for plain cookiecutter); ``tests/test_kinds.py`` checks the per-kind switches."""
    assert template_variables()["rlcore_min_version"] == MIN_VERSION
    assert template_variables()["rlcore_api"] == default_values()["rlcore_api"] == API_RANGE
    assert SpecifierSet(API_RANGE).contains(API_VERSION)


@pytest.mark.parametrize(
    ("minimum", "expected"),
    [("0.1", ">=0.1,<0.2"), ("0.12", ">=0.12,<0.13"), ("1.3", ">=1.3,<2"), ("2.0.1", ">=2.0.1,<3")],
)
def test_rlcore_range_takes_compatible_releases_only(minimum: str, expected: str, tmp_path: Path) -> None:
    """``rlcore_min_version`` gives ``rlcore[train]>=MIN,<NEXT_BREAKING`` in the dependencies (a plugin installed
    alone can train) and the test kit ``rlcore-testkit`` (versioned with rlcore) in the test extra."""
    assert compatible_range(minimum) == expected
    rlcore_new(tmp_path, "plugin_name=ranged", f"rlcore_min_version={minimum}")
    meta = tomllib.loads((tmp_path / "out" / "rlcore-plugin-ranged" / "pyproject.toml").read_text())["project"]
    assert meta["dependencies"] == [f"rlcore[train]{expected}"]
    assert meta["optional-dependencies"] == {"test": [f"rlcore-testkit{expected}"]}


@dataclass(frozen=True)
class Rendered:
    """A project that ``rlcore new plugin`` rendered: where, its distribution name, package and kinds."""

    project: Path
    name: str
    dist: str
    pkg: str
    kinds: tuple[str, ...]


def render_and_check(tmp_path: Path, kinds: tuple[str, ...]) -> Rendered:
    """Render the project of ``kinds`` (every kind: the author's name and description too) and check what was
    written: the next commands printed, the exact file set, every module compiles, the pyproject's metadata
    and the two workflows."""
    everything = kinds == KINDS
    name = "demo-all" if everything else f"demo-{kind_slug(kinds[0])}"
    people = ['author_name=Ada "The Countess" Lovelace', "github_username=ada-l", 'description=Says "hi" & <b>']
    values = [f"plugin_name={'rlcore-plugin-demo_all' if everything else name}", *switches(kinds)]
    result = rlcore_new(tmp_path, *values, *(people if everything else []))
    project = tmp_path / "out" / f"rlcore-plugin-{name}"
    next_commands = [f"  cd out/rlcore-plugin-{name}", "  pip install -e '.[test]'", "  pytest"]
    assert result.stdout.splitlines()[-3:] == next_commands
    pkg = "rlcore_plugin_" + name.replace("-", "_")
    assert project_files(project) == expected_files(kinds, pkg)
    for path in project.rglob("*.py"):
        compile(path.read_text(), str(path), "exec")

    meta = tomllib.loads((project / "pyproject.toml").read_text())["project"]
    assert meta["name"] == f"rlcore-plugin-{name}"
    assert meta["entry-points"] == {"rlcore": {name: f"{pkg}.hooks"}}
    assert meta["dependencies"][0] == f"rlcore[train]{compatible_range(MIN_VERSION)}"
    assert ("rlcore-plugin-fsdp" in meta["dependencies"]) == ("training_backend" in kinds)
    if everything:
        assert meta["authors"] == [{"name": 'Ada "The Countess" Lovelace'}]
        assert meta["description"] == 'Says "hi" & <b>'
        assert meta["urls"]["Homepage"] == f"https://github.com/ada-l/rlcore-plugin-{name}"
    else:
        assert "authors" not in meta and "urls" not in meta

    workflows = project / ".github" / "workflows"
    test_yml = (workflows / "test.yml").read_text()
    assert "${{ matrix.python-version }}" in test_yml
    assert yaml.safe_load(test_yml)["jobs"]["test"]["env"] == {"RLCORE_STRICT_PLUGINS": "1"}
    publish = yaml.safe_load((workflows / "publish.yml").read_text())["jobs"]["pypi"]
    assert publish["permissions"] == {"id-token": "write"}
    assert publish["steps"][-1]["uses"] == "pypa/gh-action-pypi-publish@release/v1"
    return Rendered(project, name, meta["name"], pkg, kinds)


@dataclass(frozen=True)
class SingleKindPlugins:
    """The projects of each kind alone, installed together into one venv beside rlcore's wheel: each one's
    rendering (its checks passed), ``rlcore plugins --json`` of that venv by distribution, and the outcome
    of every generated test (one pytest process over all the projects' tests) by node id."""

    rendered: dict[str, Rendered]
    listed: dict[str, dict[str, Any]]
    outcomes: dict[str, str]
    output: str


#: a line of pytest's ``-rA`` summary: outcome and node id
SUMMARY_LINE = re.compile(r"^(PASSED|FAILED|ERROR|XPASS|XFAIL) (\S+)")


@pytest.fixture(scope="module")
def single_kind_plugins(
    tmp_path_factory: pytest.TempPathFactory, run: Any, make_venv: Any, wheelhouse: Wheelhouse
) -> SingleKindPlugins:
    """Every kind's own project, rendered and checked (a failed check fails every kind's test), installed in one
    pip call into one venv, listed once and tested by one pytest process: the generated tests, the rlcore
    fixtures they share and the interpreter start once instead of once per kind."""
    tmp_path = tmp_path_factory.mktemp("single-kinds")
    rendered = {kind: render_and_check(tmp_path, (kind,)) for kind in KINDS}
    venv = make_venv(tmp_path / "venv", hidden=["rlcore", "rlcore-testkit"])
    venv.install(*map(wheelhouse.wheel, ("rlcore", "rlcore-testkit")), *(one.project for one in rendered.values()))
    env = plugin_env(*(one.dist for one in rendered.values()))
    rows = json.loads(run([venv.bin("rlcore"), "plugins", "--json"], env=env).stdout)
    tests = [one.project / "tests" for one in rendered.values()]
    # the folder above the projects is the root (node ids start with out/<project>/tests/), not a project's config
    args = ["-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", "--import-mode=importlib", "--rootdir", tmp_path]
    args += ["-c", os.devnull, *tests]
    result = run([venv.python, *args], cwd=tmp_path, env=env, check=False)
    outcomes = {
        match[2]: match[1] for match in map(SUMMARY_LINE.match, result.stdout.splitlines()) if match is not None
    }
    return SingleKindPlugins(rendered, {row["name"]: row for row in rows}, outcomes, result.stdout + result.stderr)


@pytest.mark.parametrize("kind", KINDS)
def test_generated_plugin_installs_and_passes_its_own_tests(kind: str, single_kind_plugins: SingleKindPlugins) -> None:
    """The project of ``kind`` alone: rendered and checked, installed beside rlcore's wheel, listed by ``rlcore
    plugins`` with exactly its component, and every test it generated passes (each test file has passing
    tests, none fails or errors)."""
    one = single_kind_plugins.rendered[kind]
    row = single_kind_plugins.listed[one.dist]
    assert row["status"] == "ok", row["error"]
    assert row["api"] == API_RANGE
    assert {(component["kind"], component["name"]) for component in row["components"]} == {(kind, one.name)}
    prefix = f"out/{one.project.name}/tests/"
    own = {node: outcome for node, outcome in single_kind_plugins.outcomes.items() if node.startswith(prefix)}
    tail = single_kind_plugins.output[-3000:]
    assert {node: outcome for node, outcome in own.items() if outcome != "PASSED"} == {}, tail
    passed_files = {node.split("::")[0].removeprefix(prefix) for node in own}
    assert passed_files == {"test_plugin.py", f"test_{kind}.py"}, tail


def test_generated_plugin_with_every_kind_installs_passes_its_own_tests_and_trains(
    tmp_path: Path, run: Any, make_venv: Any, wheelhouse: Wheelhouse, tiny_model_dir: Path
) -> None:
    """The project with every kind: rendered and checked, installed alone beside rlcore's wheel in its own
    venv, listed with all its components, its generated tests pass there, and it trains with all the
    generated components."""
    one = render_and_check(tmp_path, KINDS)
    venv = make_venv(tmp_path / "venv", hidden=["rlcore", "rlcore-testkit"])
    venv.install(wheelhouse.wheel("rlcore"), wheelhouse.wheel("rlcore-testkit"), one.project)
    assert listed_components(run, venv.bin("rlcore"), one.dist) == {(kind, one.name) for kind in KINDS}
    run([venv.python, "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=one.project, env=plugin_env(one.dist))
    train_with_every_generated_component(run, venv, tmp_path, tiny_model_dir, one.name)


def train_with_every_generated_component(run: Any, venv: Any, tmp_path: Path, model_dir: Path, name: str) -> None:
    """``rlcore run --preset <name>``: two CPU steps through the generated dataset, scorer, reward manager,
    rollout engine, training backend, estimator, loss and tracker (the preset selects them all).

    The batch filter is switched off: a random tiny model scores 0 on every response, so it would drop
    every group.
    """
    for split, rows in (("train", 16), ("test", 4)):
        lines = [json.dumps({"question": f"What is {i} + {i % 7}?", "answer": i + i % 7}) for i in range(rows)]
        (tmp_path / f"{split}.jsonl").write_text("\n".join(lines) + "\n")
    overrides = {
        "algorithm.batch_filters": "[]",
        "data.train_files": tmp_path / "train.jsonl",
        "data.val_files": tmp_path / "test.jsonl",
        "data.train_batch_size": 4,
        "data.max_prompt_length": 64,
        "data.max_response_length": 8,
        "actor_rollout_ref.model.path": model_dir,
        "actor_rollout_ref.rollout.n": 4,
        "actor_rollout_ref.actor.ppo_mini_batch_size": 2,
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 4,
        "trainer.total_training_steps": 2,
        "trainer.device": "cpu",
        "trainer.progress_bar": "false",
        "trainer.runs_dir": tmp_path / "runs",
        "trainer.default_local_dir": tmp_path / "checkpoints",
    }
    args = [venv.bin("rlcore"), "run", "--preset", name, *(f"{key}={value}" for key, value in overrides.items())]
    run(args, cwd=tmp_path, env=plugin_env(f"rlcore-plugin-{name}"))
    (run_dir,) = (tmp_path / "runs").glob("*/*")
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert config["actor_rollout_ref"]["actor"]["strategy"] == config["data"]["dataset"] == name
    steps = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [step["training/global_step"] for step in steps if "actor/pg_loss" in step] == [1, 2]
    tracked = (run_dir / f"{name.replace('-', '_')}.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in tracked][-2:] == [1, 2]


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (["plugin_name=rlcore-plugin-rlcore-plugin-x"], "plugin_name 'rlcore-plugin-rlcore-plugin-x' repeats"),
        (["plugin_name=rlcore_plugin_rlcore-plugin-x"], "plugin_name 'rlcore_plugin_rlcore-plugin-x' repeats"),
        (["plugin_name=MyAlgo"], "plugin_name 'MyAlgo' must be lowercase, e.g. 'myalgo'"),
        (["plugin_name=my.algo"], "plugin_name 'my.algo' is not a valid distribution name"),
        (["plugin_name=my--algo"], "plugin_name 'my--algo' is not a valid distribution name"),
        (["plugin_name=rlcore-plugin-"], "plugin_name 'rlcore-plugin-' is only the 'rlcore-plugin-' prefix"),
        (["plugin_name="], "plugin_name is empty"),
        (["hyphenated=X-y"], "hyphenated 'X-y' must be"),
        (["underscored=other"], "underscored 'other' must be"),
        (["rlcore_min_version=latest"], "rlcore_min_version 'latest'"),
        (["rlcore_api=1.x"], "rlcore_api '1.x' must be a PEP 440 version range"),
        (["github_username=not/a/user"], "github_username 'not/a/user'"),
        (switches(()), "choose at least one component kind"),
        (["advantage_estimator=maybe"], "advantage_estimator must be yes or no, got 'maybe'"),
        (["advantage_estmator=yes"], "variable 'advantage_estmator'. Did you mean 'advantage_estimator'?"),
        (["plugin_name"], "expected key=value, got 'plugin_name'"),
    ],
)
def test_bad_values_generate_nothing(
    values: list[str], message: str, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """Each bad value fails with exit status 2 and a message naming the variable; no file is written."""
    result = rlcore_new(tmp_path, *values, check=False)
    stderr = capfd.readouterr().err
    assert result.returncode == 2, result.stdout + stderr
    assert message in stderr
    assert "Traceback" not in stderr
    assert not [path for path in (tmp_path / "out").rglob("*") if path.is_file()]


def test_an_existing_project_is_not_overwritten(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """A second ``rlcore new plugin`` with the same name stops with an error and leaves the first intact."""
    rlcore_new(tmp_path, "plugin_name=twice")
    hooks = tmp_path / "out" / "rlcore-plugin-twice" / "src" / "rlcore_plugin_twice" / "hooks.py"
    hooks.write_text("# edited\n")
    capfd.readouterr()
    result = rlcore_new(tmp_path, "plugin_name=twice", "policy_loss=yes", check=False)
    assert result.returncode == 2
    assert "already exists" in capfd.readouterr().err
    assert hooks.read_text() == "# edited\n"


def test_repository_cookiecutter_directory_renders_the_same_project(tmp_path: Path, run: Any) -> None:
    """``cookiecutter cookiecutter/`` (the repository's pointer) gives byte-identical output to ``rlcore new``."""
    values = ["plugin_name=pointer", "policy_loss=yes", "tracker=yes"]
    rlcore_new(tmp_path, *values)
    direct = tmp_path / "direct"
    run(
        [sys.executable, "-m", "cookiecutter", "--no-input", "--output-dir", direct, ROOT / "cookiecutter", *values],
        env={"HOME": str(tmp_path / "home")},
    )
    ours, theirs = tmp_path / "out" / "rlcore-plugin-pointer", direct / "rlcore-plugin-pointer"
    assert (
        project_files(ours)
        == project_files(theirs)
        == expected_files(("advantage_estimator", "policy_loss", "tracker"), "rlcore_plugin_pointer")
    )
    for path in project_files(ours):
        assert (ours / path).read_bytes() == (theirs / path).read_bytes(), path


def test_rlcore_new_plugin_from_an_installed_wheel(
    tmp_path: Path, run: Any, make_venv: Any, wheelhouse: Wheelhouse
) -> None:
    """With rlcore and rlcore-plugin-scaffold installed from their wheels (the template is package data of the
    latter), ``rlcore new plugin --no-input`` creates the default project, prints the next commands, and the
    project installs and loads."""
    venv = make_venv(tmp_path / "venv", hidden=["rlcore", "rlcore-plugin-scaffold"])
    venv.install(wheelhouse.wheel("rlcore"), wheelhouse.wheel("rlcore-plugin-scaffold"))
    source = "from rlcore_plugin_scaffold.scaffold import PLUGIN_TEMPLATE as t; print(t)"
    template = run([venv.python, "-c", source]).stdout.strip()
    assert Path(template).is_relative_to(venv.site_packages)
    work = tmp_path / "work"
    work.mkdir()
    result = run([venv.bin("rlcore"), "new", "plugin", "--no-input"], cwd=work, env={"HOME": str(tmp_path)})
    assert result.stdout.splitlines()[-3:] == ["  cd rlcore-plugin-myalgo", "  pip install -e '.[test]'", "  pytest"]
    project = work / "rlcore-plugin-myalgo"
    assert project_files(project) == expected_files(("advantage_estimator",), "rlcore_plugin_myalgo")
    run(
        [venv.python, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", "--no-build-isolation", "-e", "."],
        cwd=project,
    )
    assert listed_components(run, venv.bin("rlcore"), "rlcore-plugin-myalgo") == {("advantage_estimator", "myalgo")}
