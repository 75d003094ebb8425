"""The linters CI runs, through the README's test command: ruff (lint and format) over the repository and
mypy over the typed modules listed in ``pyproject.toml``. ``pre-commit`` runs the same tools."""

from __future__ import annotations

import glob
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    """Run a tool from the test environment in the repository root."""
    return subprocess.run([*args], cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)


@pytest.fixture(scope="module")
def ruff() -> str:
    """The ruff executable of this environment (the ``test`` extra pins it)."""
    path = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if path is None:
        pytest.fail("ruff is not installed: pip install -e '.[test]'")
    return path


def test_ruff_lint(ruff: str) -> None:
    """``ruff check`` finds nothing (rules: pyproject.toml)."""
    result = run(ruff, "check", "--no-cache", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_format(ruff: str) -> None:
    """Every file is formatted as ``ruff format`` writes it."""
    result = run(ruff, "format", "--check", "--no-cache", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy(request: pytest.FixtureRequest, tmp_path: Path) -> None:
    """mypy passes on the files ``[tool.mypy]`` lists (the contracts and a step's path through the code).

    mypy's incremental cache lives in pytest's cache folder (``.pytest_cache``, kept between runs of this
    checkout; this test's ``tmp_path`` under ``-p no:cacheprovider``): mypy re-reads only the modules whose
    source or options changed since (and those that depend on them), so a rerun costs seconds instead of the
    minute and a half of a first run (most of it reading torch, transformers, vLLM and their dependencies)."""
    cache = request.config.cache.mkdir("mypy") if hasattr(request.config, "cache") else tmp_path
    result = run(sys.executable, "-m", "mypy", "--cache-dir", str(cache))
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_covers_the_core_and_every_plugin() -> None:
    """``[tool.mypy] files`` covers ``core/rlcore`` and every ``plugins/<name>/src`` (so a new plugin cannot
    be left unchecked), and ``exclude`` leaves out nothing but the plugin template."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["mypy"]
    listed = [Path(match) for pattern in config["files"] for match in glob.glob(str(ROOT / pattern))]
    wanted = [ROOT / "core" / "rlcore", *sorted(ROOT.glob("plugins/*/src"))]
    assert len(wanted) > 1, "no plugins/*/src found"
    unchecked = [str(path.relative_to(ROOT)) for path in wanted if not any(path.is_relative_to(p) for p in listed)]
    assert not unchecked, f"not in [tool.mypy] files: {unchecked}"
    sources = sorted(path.relative_to(ROOT).as_posix() for root in wanted for path in root.rglob("*.py"))
    excluded = [
        source
        for source in sources
        if not source.startswith("plugins/scaffold/src/rlcore_plugin_scaffold/templates/")
        and any(re.search(pattern, source) for pattern in config.get("exclude", []))
    ]
    assert not excluded, f"excluded from mypy: {excluded}"
