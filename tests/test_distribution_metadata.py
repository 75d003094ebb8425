"""Every distribution in the repository declares its metadata the same way (issue: consistent metadata)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PROJECTS = sorted([ROOT / "pyproject.toml", *ROOT.glob("plugins/*/pyproject.toml")])


@pytest.mark.parametrize("path", PROJECTS, ids=lambda p: p.parent.name)
def test_metadata_is_consistent(path: Path) -> None:
    """Same build backend and minimum, SPDX licence, Python floor and version; a README that exists; plugins
    name their distribution rlcore-plugin-* and declare an ``rlcore`` entry point; the test kit (no plugin)
    is ``rlcore-testkit`` and declares the ``pytest11`` entry point of its fixtures."""
    data = tomllib.loads(path.read_text())
    project = data["project"]
    assert data["build-system"] == {"requires": ["setuptools>=77"], "build-backend": "setuptools.build_meta"}
    assert project["license"] == "Apache-2.0"
    assert project["requires-python"] == ">=3.11"
    assert project["version"] == "0.1.0"
    assert (path.parent / project["readme"]).is_file()
    if path.parent == ROOT / "plugins" / "testkit":
        assert project["name"] == "rlcore-testkit"
        assert project["entry-points"] == {"pytest11": {"rlcore": "rlcore_testkit.pytest_plugin"}}
        assert any(dep.startswith("rlcore[train]") for dep in project["dependencies"])
    elif path.parent != ROOT:
        assert project["name"].startswith("rlcore-plugin-")
        assert project["entry-points"]["rlcore"], "a plugin registers through the 'rlcore' entry-point group"
        assert any(dep.startswith("rlcore") for dep in project["dependencies"])
