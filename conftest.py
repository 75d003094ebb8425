"""Settings for every test run of the repository (core and plugin tests alike).

Tests run in two xdist workers (``-n 2`` in ``pyproject.toml``), each using one core: torch, its
subprocesses, Ray actors and vLLM all get one OpenMP thread unless ``OMP_NUM_THREADS`` is already set.
More threads than free cores make every OpenMP region wait for descheduled threads, which on a 2-core
machine slowed steps tenfold.

vLLM's engine runs in the process that starts it (vLLM's own switch ``VLLM_ENABLE_V1_MULTIPROCESSING=0``, unless
the variable is already set). By default vLLM on the CPU spawns an engine-core process and that one a worker
process, each importing vLLM again: a start took ~31 s of CPU, in-process it takes ~14 s (a second start in the
same process ~3 s). ``plugins/rollout_vllm/tests/test_weight_sync.py`` keeps vLLM's default, separate processes.
"""

import importlib.util
import os
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

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
    "tests/test_wheelhouse.py",
    "tests/test_default_commands.py",
    "tests/test_ray_executor.py",
    "tests/test_async_partial_lane.py",
    "plugins/backend_megatron/tests/test_multirank.py",
    "tests/test_lint.py",
    "tests/test_template.py",
    "plugins/backend_megatron/tests/test_lora.py",
    "plugins/algo_distill/tests/test_topk.py",
    "tests/test_bench_gpu.py",
    "tests/test_sft.py",
    "plugins/backend_fsdp/tests/test_moe.py",
    "tests/test_ulysses.py",
    "tests/test_user_code_exit.py",
    "tests/test_stop_signal.py",
    "plugins/backend_megatron/tests/test_token_ids.py",
    "plugins/backend_megatron/tests/test_run.py",
    "tests/test_verl_fully_async_run.py",
)

#: the modules whose runs use the test process's shared Ray (the test kit's ``warm_ray``), longest first: xdist hands
#: them out before every other file, one after the other, so that each worker starts its shared Ray once and takes
#: over idle workers from module to module; the first module of a worker that does not use it stops it
WARM_RAY_FILES = (
    "tests/test_off_policy.py",
    "plugins/algo_distill/tests/test_topk.py",
    "plugins/profiler/tests/test_torch_options.py",
    "plugins/profiler/tests/test_profiling.py",
    "tests/test_async_partial_lane.py",
    "tests/test_verl_fully_async_run.py",
    "plugins/backend_fsdp/tests/test_moe.py",
    "plugins/backend_megatron/tests/test_run.py",
    "plugins/testkit/tests/test_shared_ray.py",
)

#: the other tests that take over 0.7 s on two idle cores (real runs, processes, engines; the tests over 1.5 s until
#: the quick loop grew past 3 minutes), one node id per line, also marked ``slow``; ``tests/update_slow_tests.py``
#: adds to it from a ``--durations`` report
SLOW_TESTS = Path(__file__).parent / "tests" / "slow_tests.txt"


def pytest_collection_modifyitems(items: list) -> None:
    """Mark the tests of :data:`LONG_FILES` and :data:`SLOW_TESTS` ``slow`` and move :data:`WARM_RAY_FILES`, then
    :data:`FIRST_FILES` to the front, in that order (xdist hands out files in order)."""
    order = [*WARM_RAY_FILES, *(path for path in FIRST_FILES if path not in WARM_RAY_FILES)]
    rank = {path: index for index, path in enumerate(order)}
    listed = {line.strip() for line in SLOW_TESTS.read_text().splitlines() if line.strip() and not line.startswith("#")}
    for item in items:
        if item.nodeid.split("::")[0] in LONG_FILES or item.nodeid in listed:
            item.add_marker(pytest.mark.slow)
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(order)))


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


@pytest.fixture(autouse=True)
def _torch_threads_after_vllm() -> Iterator[None]:
    """After each test, give ``torch.set_num_threads`` back where a vLLM engine started in the test's process
    replaced it: vLLM's CPU worker swaps it process-wide for a function that only warns (guarding its own thread
    binding), which would turn every later test's and run's thread setting into a no-op."""
    yield
    torch = sys.modules.get("torch")
    if torch is not None and "vllm" in sys.modules and torch.set_num_threads is not torch._C.set_num_threads:
        torch.set_num_threads = torch._C.set_num_threads
