"""Settings for every test run of the repository (core and plugin tests alike).

Tests run in two xdist workers (``-n 2`` in ``pyproject.toml``), each using one core: torch, its
subprocesses, Ray actors and vLLM all get one OpenMP thread unless ``OMP_NUM_THREADS`` is already set.
More threads than free cores make every OpenMP region wait for descheduled threads, which on a 2-core
machine slowed steps tenfold.
"""

import os
from pathlib import Path

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


#: the other tests that take over 1.5 s on two idle cores (real runs, processes, engines), one node id per
#: line, also marked ``slow``; ``tests/update_slow_tests.py`` adds to it from a ``--durations`` report
SLOW_TESTS = Path(__file__).parent / "tests" / "slow_tests.txt"


def pytest_collection_modifyitems(items: list) -> None:
    """Mark the tests of :data:`LONG_FILES` and :data:`SLOW_TESTS` ``slow`` and move :data:`LONG_FILES` to the
    front, in that order (xdist hands out files in order)."""
    import pytest

    rank = {path: index for index, path in enumerate(LONG_FILES)}
    listed = {line.strip() for line in SLOW_TESTS.read_text().splitlines() if line.strip() and not line.startswith("#")}
    for item in items:
        if item.nodeid.split("::")[0] in rank or item.nodeid in listed:
            item.add_marker(pytest.mark.slow)
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(LONG_FILES)))
