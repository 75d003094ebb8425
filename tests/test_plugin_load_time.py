"""A plugin that is slow to load is named: every command warns past ``RLCORE_SLOW_PLUGIN_SECONDS`` (default 2 s),
and ``rlcore plugins --verbose`` shows each plugin's load time.

The slow plugin is a real installed distribution: a ``.dist-info`` folder with an ``entry_points.txt`` next to
its hooks module in a folder on ``PYTHONPATH``, found by ``importlib.metadata`` as after ``pip install``. Its
hooks module sleeps when imported; the threshold is lowered through the variable so that the sleep stays short.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlcore.plugins import DEFAULT_SLOW_PLUGIN_SECONDS, ENV_SLOW

SLEEP_S = 1.0
HOOKS = f"""
import time

import rlcore

RLCORE_API = ">=1"

time.sleep({SLEEP_S})


@rlcore.hookimpl
def register_presets(register):
    register("demo-slow-preset", {{"trainer.total_epochs": 2}}, description="two epochs")
"""


@pytest.fixture(scope="module")
def slow_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding the distribution ``rlcore-demo-slow`` (entry point ``demo_slow_hooks``)."""
    site = tmp_path_factory.mktemp("slow-site")
    (site / "demo_slow_hooks.py").write_text(HOOKS)
    info = site / "rlcore_demo_slow-0.3.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: rlcore-demo-slow\nVersion: 0.3\n")
    (info / "entry_points.txt").write_text("[rlcore]\ndemo_slow = demo_slow_hooks\n")
    return site


def rlcore(site: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m rlcore ARGS`` with ``site`` first on the path (this checkout's code after it)."""
    full = {k: v for k, v in os.environ.items() if not k.startswith("RLCORE_")}
    full["PYTHONPATH"] = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p)
    full.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "rlcore", *args], capture_output=True, text=True, env=full, timeout=120
    )


def test_the_default_threshold_is_two_seconds() -> None:
    assert DEFAULT_SLOW_PLUGIN_SECONDS == 2.0


def test_a_slow_plugin_is_named_by_every_command(slow_site: Path) -> None:
    threshold = 0.4
    env = {ENV_SLOW: str(threshold)}
    listing = rlcore(slow_site, "plugins", "--json", "--verbose", env=env)
    assert listing.returncode == 0, listing.stderr
    rows = {row["name"]: row for row in json.loads(listing.stdout)}
    assert rows["rlcore-demo-slow"]["load_seconds"] >= SLEEP_S
    assert rows["rlcore-demo-slow"]["status"] == "ok"
    warnings = [line for line in listing.stderr.splitlines() if line.startswith("warning: plugin")]
    (warning,) = [line for line in warnings if line.startswith("warning: plugin rlcore-demo-slow took")]
    assert f"took {rows['rlcore-demo-slow']['load_seconds']:.1f} s to load (demo_slow_hooks" in warning
    assert "RLCORE_DISABLE_PLUGINS=rlcore-demo-slow skips it" in warning
    for name, row in rows.items():  # a plugin under the threshold is never named
        if row["load_seconds"] is not None and row["load_seconds"] < threshold:
            assert not any(line.startswith(f"warning: plugin {name} took") for line in warnings), name
    shown = rlcore(slow_site, "config", "show", "--preset", "demo-slow-preset", env=env)
    assert shown.returncode == 0, shown.stderr
    assert "total_epochs: 2" in shown.stdout
    assert "warning: plugin rlcore-demo-slow took" in shown.stderr


def test_the_verbose_table_shows_load_times_and_the_default_threshold_is_quiet(slow_site: Path) -> None:
    table = rlcore(slow_site, "plugins", "--verbose")
    assert table.returncode == 0, table.stderr
    header, *rows = table.stdout.splitlines()
    assert header.split() == ["PLUGIN", "VERSION", "STATUS", "LOAD", "COMPONENTS"]
    (slow,) = [line for line in rows if line.startswith("rlcore-demo-slow ")]
    assert float(slow.split()[3].rstrip("s")) >= SLEEP_S
    assert "warning: plugin" not in table.stderr, "1 s is under the default 2 s"
    plain = rlcore(slow_site, "plugins", "--json")
    assert all("load_seconds" not in row for row in json.loads(plain.stdout)), "load times are --verbose output"


def test_a_bad_threshold_is_one_clear_error(slow_site: Path) -> None:
    result = rlcore(slow_site, "plugins", env={ENV_SLOW: "soon"})
    assert result.returncode == 1
    assert f"error: {ENV_SLOW}='soon' must be a number of seconds >= 0" in result.stderr
    assert "Traceback" not in result.stderr
