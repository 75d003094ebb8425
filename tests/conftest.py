"""Fixtures for tests that install distributions into a fresh virtual environment, as a user would.

``run`` runs a command with a clean environment and fails the test with its output when it fails.
The wheels of rlcore's distributions come from the README's wheelhouse, built once per test run
(``tests/venv_fixtures.py``). ``make_venv(path, hidden=...)`` creates a :class:`Venv` that sees this environment's
packages (torch, transformers, pytest, pip, ...) through a ``.pth`` file, except the distributions named
in ``hidden``: their ``.dist-info`` and editable-install ``.pth`` files are left out, so neither their
entry points nor their source trees are visible there. What a test installs with :meth:`Venv.install`
comes from the wheel or project it names, and nowhere else.

``single_intra_op_thread`` runs a test with one intra-op torch thread (tests of tiny models mark themselves
with it).

``bench_script(name)`` loads ``bench/<name>.py`` as a module, for tests of a benchmark's pieces.

``once_per_test_run`` makes a folder once per pytest run, however many xdist workers ask for it, and
``command_once`` (:func:`rlcore_command_once`) runs an ``rlcore`` command that way: the README's ``rlcore run``, shown by two pages and
checked by ``test_default_run.py``, trains once per run of the suite.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import json
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from rlcore.plugins import normalize_dist_name

ROOT = Path(__file__).resolve().parents[1]

Runner = Callable[..., "subprocess.CompletedProcess[str]"]

# The Ray clusters the tests start run tiny workers beside whatever else uses the machine (other test processes, a
# parallel suite): Ray's memory monitor, which kills workers when the *whole node* is over 95% of its memory, would
# kill them for memory they do not use. The kernel's out-of-memory killer still acts on real exhaustion.
os.environ.setdefault("RAY_memory_monitor_refresh_ms", "0")


@pytest.fixture
def single_intra_op_thread() -> Iterator[None]:
    """Run the test with one intra-op thread (restored afterwards).

    A tiny model's ops are far too small to gain from intra-op parallelism, and on a shared machine an
    intra-op thread that is descheduled stalls every op of a decoding loop.
    """
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def installed_distribution(entry: str) -> str | None:
    """The normalised distribution a site-packages entry belongs to (``.dist-info``, editable ``.pth``)."""
    for prefix, suffix in (("", ".dist-info"), ("__editable__.", ".pth")):
        if entry.startswith(prefix) and entry.endswith(suffix) and "-" in entry:
            return normalize_dist_name(entry[len(prefix) : -len(suffix)].rsplit("-", 1)[0])
    return None


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without ``RLCORE_*``, ``PYTHONPATH`` and the active venv, plus ``extra``."""
    drop = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")
    env = {key: value for key, value in os.environ.items() if not key.startswith("RLCORE_") and key not in drop}
    return {**env, **extra}


def run_command(
    args: Iterable[Any], *, cwd: Path | None = None, env: dict[str, str] | None = None, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """Run ``args`` in :func:`clean_env` plus the variables ``env``, capturing text; with ``check``, a failure
    fails the test and shows the command's output."""
    argv = [str(arg) for arg in args]
    result = subprocess.run(argv, cwd=cwd, env=clean_env(**(env or {})), capture_output=True, text=True)
    if check and result.returncode != 0:
        output = f"--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}"
        pytest.fail(f"{' '.join(argv)} exited {result.returncode}\n{output}")
    return result


class Venv:
    """A virtual environment beside this one: its own site-packages first, then this environment's."""

    def __init__(self, path: Path, hidden: Iterable[str] = ()) -> None:
        """Create the venv at ``path``; this environment's site-packages entries of ``hidden`` are left out.

        The visible entries are symlinked into ``<path>/shared-site``, which a ``.pth`` file adds with
        ``site.addsitedir`` so that the editable installs' own ``.pth`` files there are processed too.
        """
        self.path = path
        hide = {normalize_dist_name(name) for name in hidden}
        run_command([sys.executable, "-m", "venv", "--without-pip", path])
        shared = path / "shared-site"
        shared.mkdir()
        for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
            if installed_distribution(entry.name) not in hide:
                (shared / entry.name).symlink_to(entry)
        self.site_packages = Path(
            run_command([self.python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()
        )
        (self.site_packages / "_shared_site.pth").write_text(f"import site; site.addsitedir({str(shared)!r})\n")

    @property
    def python(self) -> Path:
        """The venv's interpreter."""
        return self.path / "bin" / "python"

    def bin(self, script: str) -> Path:
        """A console script installed into the venv (e.g. ``rlcore``)."""
        return self.path / "bin" / script

    def install(self, *targets: Path) -> None:
        """pip-install wheels or project directories, offline and without dependencies."""
        run_command(
            [
                self.python,
                "-m",
                "pip",
                "install",
                "--quiet",
                "--no-deps",
                "--no-index",
                "--no-build-isolation",
                *targets,
            ]
        )


def load_bench_script(name: str) -> ModuleType:
    """``bench/<name>.py`` as a module (the bench folder is not a package: its scripts import ``common`` from it,
    so it is on ``sys.path`` while the script loads)."""
    bench = ROOT / "bench"
    sys.path.insert(0, str(bench))
    try:
        spec = importlib.util.spec_from_file_location(f"bench_{name}", bench / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(bench))


@pytest.fixture(scope="session")
def bench_script() -> Callable[[str], ModuleType]:
    """``bench_script(name)``: ``bench/<name>.py`` as a module (:func:`load_bench_script`)."""
    return load_bench_script


@pytest.fixture(scope="session")
def run() -> Runner:
    """``run(args, cwd=None, env=None, check=True)``: see :func:`run_command` (``env`` adds variables)."""
    return run_command


@pytest.fixture(scope="session")
def make_venv() -> Callable[..., Venv]:
    """``make_venv(path, hidden=())``: a :class:`Venv`."""
    return Venv


PLUGIN_PYPROJECT = """\
[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "{dist}"
version = "{version}"
dependencies = []

[project.entry-points.rlcore]
{ep} = "{pkg}.hooks"

[tool.setuptools.packages.find]
where = ["src"]
"""


def install_throwaway_plugins(
    src_root: Path, target: Path, plugins: dict[str, tuple[str, str, dict[str, str]]]
) -> Path:
    """Write each ``{dist: (package, version, {file name: source})}`` as a plugin project (entry point
    ``package.hooks``) under ``src_root``, build and pip-install them all into ``target``; returns ``target``."""
    import textwrap

    projects = []
    for dist, (pkg, version, files) in plugins.items():
        project = src_root / dist
        (project / "src" / pkg).mkdir(parents=True)
        (project / "pyproject.toml").write_text(PLUGIN_PYPROJECT.format(dist=dist, version=version, ep=pkg, pkg=pkg))
        (project / "src" / pkg / "__init__.py").write_text("")
        for name, text in files.items():
            (project / "src" / pkg / name).write_text(textwrap.dedent(text))
        projects.append(str(project))
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--no-warn-script-location",
            "--target",
            str(target),
            *projects,
        ],
        check=True,
    )
    return target


@pytest.fixture(scope="session")
def throwaway_plugins() -> Callable[..., Path]:
    """:func:`install_throwaway_plugins`, for tests that need real installed plugin distributions."""
    return install_throwaway_plugins


def shared_temp_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder every xdist worker of this pytest run shares (the parent of the workers' own base folders),
    or this run's base folder without xdist."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def once_per_test_run(tmp_path_factory: pytest.TempPathFactory, name: str, make: Callable[[Path], None]) -> Path:
    """The folder ``<shared root>/<name>``, filled by ``make(folder)`` once per pytest run: the first worker to ask
    makes it under an exclusive lock while the others wait, then all of them use it as it is (read only). A
    folder whose making failed is made again by the next caller, which then fails the same way with its own
    error."""
    root = shared_temp_root(tmp_path_factory)
    folder = root / name
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (folder / ".made").exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            make(folder)
            (folder / ".made").touch()
    return folder


@dataclass(frozen=True)
class CommandRun:
    """An ``rlcore`` command run by :func:`rlcore_command_once`: its folder, exit status and output (standard
    output and error as one text, in order)."""

    folder: Path
    returncode: int
    output: str


def rlcore_command_once(tmp_path_factory: pytest.TempPathFactory, command: str, env: dict[str, str]) -> CommandRun:
    """``command`` (``rlcore ...``, as a page shows it) run once per pytest run, as a new user runs it: in an empty
    folder, with an empty cache (``RLCORE_CACHE=<folder>/cache``), no ``RLCORE_*`` or ``DS_*`` variables of this
    environment, the variables ``env`` and 120 columns. Every test asking for the same command and variables
    gets the same run; none may change its folder."""
    words = shlex.split(command)
    assert words[0] == "rlcore", f"only rlcore commands are run: {command}"
    key = hashlib.sha256(json.dumps([command, sorted(env.items())]).encode()).hexdigest()[:16]

    def make(folder: Path) -> None:
        variables = {k: v for k, v in os.environ.items() if not k.startswith(("RLCORE_", "DS_"))}
        variables.update(env, RLCORE_CACHE=str(folder / "cache"), COLUMNS="120")
        result = subprocess.run(
            [sys.executable, "-m", "rlcore", *words[1:]],
            cwd=folder,
            env=variables,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=1800,
        )
        (folder / "command.json").write_text(json.dumps({"returncode": result.returncode, "output": result.stdout}))

    folder = once_per_test_run(tmp_path_factory, f"rlcore-command-{key}", make)
    recorded = json.loads((folder / "command.json").read_text())
    return CommandRun(folder, recorded["returncode"], recorded["output"])


@pytest.fixture(scope="session")
def command_once(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., CommandRun]:
    """``command_once(command, env={})``: see :func:`rlcore_command_once`."""

    def run_once(command: str, env: dict[str, str] | None = None) -> CommandRun:
        return rlcore_command_once(tmp_path_factory, command, env or {})

    return run_once
