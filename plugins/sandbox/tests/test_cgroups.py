"""Program cgroups that a killed caller left behind are swept when the next sandbox starts; live ones stay."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from rlcore_plugin_sandbox import cgroups


def made_cgroups(layout: cgroups.Layout, pid: int) -> list[Path]:
    """Empty program cgroups named as process ``pid`` names its own, in each of ``layout``'s hierarchies."""
    folders = [Path(parent) / f"{cgroups.PREFIX}{pid}-0123abcd" for parent in sorted({layout.memory, layout.pids})]
    for folder in folders:
        folder.mkdir()
    return folders


def test_cgroups_of_a_dead_caller_are_swept_and_a_live_callers_stay() -> None:
    layout, reason = cgroups.find_layout()
    if layout is None:
        pytest.skip(f"no cgroups here: {reason}")
    finished = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(finished.stdout)
    try:
        stale = made_cgroups(layout, dead_pid)
        live = made_cgroups(layout, os.getpid())
    except OSError as error:
        pytest.skip(f"cannot create cgroups under {layout.memory}: {error}")
    try:
        assert cgroups.probe()[0] == layout
        assert not any(folder.exists() for folder in stale)
        assert all(folder.is_dir() for folder in live)
    finally:
        for folder in stale + live:
            if folder.exists():
                folder.rmdir()
