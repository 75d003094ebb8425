"""``conftest.py``'s file lists name files that exist, and ``WARM_RAY_FILES`` names exactly the modules that use the
test process's shared Ray (the test kit's ``warm_ray``), so that xdist hands them out one after the other, first."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def root_conftest() -> ModuleType:
    """The repository's ``conftest.py``, loaded under a name of its own."""
    spec = importlib.util.spec_from_file_location("root_conftest_for_order", ROOT / "conftest.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_ordered_files_exist() -> None:
    conftest = root_conftest()
    for path in (*conftest.WARM_RAY_FILES, *conftest.FIRST_FILES, *conftest.LONG_FILES):
        assert (ROOT / path).is_file(), path


def test_warm_ray_files_are_the_modules_that_use_the_shared_ray() -> None:
    modules = [*ROOT.glob("tests/test_*.py"), *ROOT.glob("plugins/*/tests/**/test_*.py")]
    using = {
        str(path.relative_to(ROOT))
        for path in modules
        if path != Path(__file__).resolve() and "warm_ray: None" in path.read_text()
    }
    assert using == set(root_conftest().WARM_RAY_FILES)
