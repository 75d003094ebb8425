"""The README's wheelhouse, built once per test run and shared by every test that installs this checkout's wheels.

``python tools/wheelhouse.py --out DIR`` (one wheel of every distribution: rlcore and each ``plugins/<name>``) runs
once per pytest run, however many xdist workers ask (:func:`once_per_test_run` of ``tests/conftest.py``): the pip
door of ``tests/test_wheelhouse.py`` checks and installs from it, and the tests that install rlcore's, the test
kit's or the scaffold's wheel take theirs from it instead of building each again. A test file uses the fixture by
importing it (``from tests.venv_fixtures import wheelhouse_fixture  # noqa: F401``).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from rlcore.plugins import normalize_dist_name
from tests.conftest import once_per_test_run, run_command

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Wheelhouse:
    """The folder ``tools/wheelhouse.py`` filled, and what it printed."""

    folder: Path
    stdout: str

    def wheel(self, distribution: str) -> Path:
        """The wheel of ``distribution`` (e.g. ``rlcore-testkit``), which must be the only one of that name."""
        wanted = normalize_dist_name(distribution)
        (wheel,) = [
            path for path in self.folder.glob("*.whl") if normalize_dist_name(path.name.split("-")[0]) == wanted
        ]
        return wheel


@pytest.fixture(scope="session", name="wheelhouse")
def wheelhouse_fixture(tmp_path_factory: pytest.TempPathFactory) -> Wheelhouse:
    """``python tools/wheelhouse.py --out <folder>/wheelhouse``, run once per test run."""

    def build(folder: Path) -> None:
        built = run_command(
            [sys.executable, ROOT / "tools" / "wheelhouse.py", "--out", folder / "wheelhouse"], cwd=folder
        )
        (folder / "stdout.txt").write_text(built.stdout)

    folder = once_per_test_run(tmp_path_factory, "wheelhouse", build)
    return Wheelhouse(folder / "wheelhouse", (folder / "stdout.txt").read_text())
