"""Settings for every test run of the repository (core and plugin tests alike).

Tests run in two xdist workers (``-n 2`` in ``pyproject.toml``), each using one core: torch, its
subprocesses, Ray actors and vLLM all get one OpenMP thread unless ``OMP_NUM_THREADS`` is already set.
More threads than free cores make every OpenMP region wait for descheduled threads, which on a 2-core
machine slowed steps tenfold.
"""

import importlib.util
import os
import tomllib
from pathlib import Path

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")

#: the bundled plugins, one folder each (``plugins/<folder>/src/<package>``)
PLUGINS = Path(__file__).parent / "plugins"

#: a plugin's sources are no tests, though the scaffold's template holds test files (cookiecutter syntax)
collect_ignore_glob = ["plugins/*/src"]

#: test files that take minutes: their tests are marked ``slow`` (``pytest -m "not slow"`` is the quick local loop;
#: CI runs everything), and they start first (:data:`FIRST_FILES`)
LONG_FILES = (
    "tests/test_seed_command.py",
    "plugins/backend_megatron/tests/test_seed_command.py",
    "tests/test_wheelhouse.py",
    "tests/test_default_run.py",
    "tests/test_bench_gpu.py",
    "plugins/backend_megatron/tests/test_multirank.py",
    "plugins/rollout_vllm/tests/test_contract.py",
    "tests/test_template.py",
    "plugins/rollout_vllm/tests/test_engine.py",
    "plugins/backend_megatron/tests/test_run.py",
    "tests/test_async_partial_lane.py",
    "tests/test_verl_fully_async_run.py",
)


#: the files xdist hands out first, longest first, so that the two workers finish together (``--dist loadfile``
#: gives a worker the next file in order when it runs out): :data:`LONG_FILES` and every file whose tests took over
#: 40 s together on two idle cores (``python tests/update_slow_tests.py REPORT --first-files 40`` prints them from the
#: durations of a whole run); the quick tests of a file here stay in the quick loop unless it is one of :data:`LONG_FILES`
FIRST_FILES = (
    "tests/test_seed_command.py",
    "tests/test_health_monitors_runs.py",
    "plugins/backend_megatron/tests/test_seed_command.py",
    "tests/test_off_policy.py",
    "tests/test_default_run.py",
    "plugins/rollout_vllm/tests/test_contract.py",
    "plugins/rollout_vllm/tests/test_moe.py",
    "tests/test_wheelhouse.py",
    "tests/test_default_commands.py",
    "tests/test_ray_executor.py",
    "tests/test_async_partial_lane.py",
    "plugins/backend_megatron/tests/test_multirank.py",
    "tests/test_lint.py",
    "tests/test_template.py",
    "plugins/backend_megatron/tests/test_lora.py",
    "plugins/rollout_vllm/tests/test_engine.py",
    "plugins/algo_distill/tests/test_topk.py",
    "tests/test_bench_gpu.py",
    "tests/test_sft.py",
    "plugins/rollout_vllm/tests/test_multiturn.py",
    "plugins/backend_fsdp/tests/test_moe.py",
    "tests/test_ulysses.py",
    "tests/test_user_code_exit.py",
    "plugins/rollout_vllm/tests/test_profile.py",
    "tests/test_stop_signal.py",
    "plugins/backend_megatron/tests/test_token_ids.py",
    "plugins/backend_megatron/tests/test_run.py",
    "tests/test_verl_fully_async_run.py",
)

#: the other tests that take over 0.7 s on two idle cores (real runs, processes, engines; the tests over 1.5 s until
#: the quick loop grew past 3 minutes), one node id per line, also marked ``slow``; ``tests/update_slow_tests.py``
#: adds to it from a ``--durations`` report
SLOW_TESTS = Path(__file__).parent / "tests" / "slow_tests.txt"


def pytest_collection_modifyitems(items: list) -> None:
    """Mark the tests of :data:`LONG_FILES` and :data:`SLOW_TESTS` ``slow`` and move :data:`FIRST_FILES` to the
    front, in that order (xdist hands out files in order)."""
    rank = {path: index for index, path in enumerate(FIRST_FILES)}
    listed = {line.strip() for line in SLOW_TESTS.read_text().splitlines() if line.strip() and not line.startswith("#")}
    for item in items:
        if item.nodeid.split("::")[0] in LONG_FILES or item.nodeid in listed:
            item.add_marker(pytest.mark.slow)
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(FIRST_FILES)))


class NotInstalledPlugin(pytest.Directory):
    """A bundled plugin's folder whose package is not installed: collecting it is one skip that names the
    plugin, instead of an import error in each of its test modules (or its ``conftest.py``)."""

    def collect(self) -> list:
        """Skip the folder."""
        name = tomllib.loads((self.path / "pyproject.toml").read_text())["project"]["name"]
        folder = self.path.relative_to(PLUGINS.parent)
        raise pytest.skip.Exception(f"{name} is not installed (pip install -e {folder})")


def _plugin_package(path: Path) -> str | None:
    """The import package of the bundled plugin whose folder is ``path`` (``plugins/<folder>``), or None when
    ``path`` is no such folder."""
    if path.parent != PLUGINS or not (path / "pyproject.toml").is_file():
        return None
    packages = sorted(init.parent.name for init in (path / "src").glob("*/__init__.py"))
    return packages[0] if packages else None


def pytest_collect_directory(path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    """Collect the folder of a bundled plugin that is not installed (its package cannot be imported) as a
    :class:`NotInstalledPlugin`, so that ``pytest -m gpu`` on a machine with only some plugins collects
    cleanly; every other folder as pytest would."""
    package = _plugin_package(path)
    if package is None or importlib.util.find_spec(package) is not None:
        return None
    return NotInstalledPlugin.from_parent(parent, path=path)
