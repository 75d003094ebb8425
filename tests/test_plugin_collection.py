"""The repository's ``conftest.py`` collects the tests of a bundled plugin that is not installed as one skip naming
it, so that ``pytest -m gpu`` runs on a machine that has only some plugins."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _plugin(root: Path, folder: str, name: str, package: str, test: str) -> None:
    """``plugins/<folder>``: a pyproject naming ``name``, ``src/<package>`` and a tests folder whose conftest and
    test module import ``package``."""
    base = root / "plugins" / folder
    (base / "src" / package).mkdir(parents=True)
    (base / "src" / package / "__init__.py").write_text("")
    (base / "pyproject.toml").write_text(f'[project]\nname = "{name}"\nversion = "0.1.0"\n')
    (base / "tests").mkdir()
    (base / "tests" / "conftest.py").write_text(f"import {package}\n")
    (base / "tests" / f"test_{folder}.py").write_text(f"import pytest\n\nimport {package}\n\n{test}")


def test_a_plugin_that_is_not_installed_is_skipped_by_name(tmp_path: Path) -> None:
    """``pytest -m gpu``: an installed plugin's GPU test runs, the missing plugin is one skip with its name and
    the command that installs it, and nothing fails to import."""
    shutil.copy2(ROOT / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "slow_tests.txt").write_text("")
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    gpu: needs CUDA\n    slow: takes minutes\n")
    gpu_test = "@pytest.mark.gpu\ndef test_on_gpu():\n    pass\n\n\ndef test_on_cpu():\n    pass\n"
    _plugin(tmp_path, "present", "rlcore-plugin-present", "rlcore_plugin_grpo", gpu_test)
    _plugin(tmp_path, "ghost", "rlcore-plugin-ghost", "rlcore_plugin_ghost_never_installed", gpu_test)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-m", "gpu", "-rs", "-p", "no:randomly", "-p", "no:cacheprovider", "plugins"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed, 1 skipped, 1 deselected" in done.stdout
    (skip,) = [line for line in done.stdout.splitlines() if line.startswith("SKIPPED [1]")]
    assert skip.endswith(": rlcore-plugin-ghost is not installed (pip install -e plugins/ghost)")
