"""Settings for every test run of the repository (core and plugin tests alike).

Tests run in two xdist workers (``-n 2`` in ``pyproject.toml``), each using one core: torch, its
subprocesses, Ray actors and vLLM all get one OpenMP thread unless ``OMP_NUM_THREADS`` is already set.
More threads than free cores make every OpenMP region wait for descheduled threads, which on a 2-core
machine slowed steps tenfold.
"""

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

#: test files that take minutes, longest first: they start first so that the two workers finish together,
#: and their tests are marked ``slow`` (``pytest -m "not slow"`` is the quick local loop; CI runs everything)
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
)


def pytest_collection_modifyitems(items: list) -> None:
    """Mark the tests of :data:`LONG_FILES` ``slow`` and move them to the front, in that order (xdist hands
    out files in order)."""
    import pytest

    rank = {path: index for index, path in enumerate(LONG_FILES)}
    for item in items:
        if item.nodeid.split("::")[0] in rank:
            item.add_marker(pytest.mark.slow)
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(LONG_FILES)))
