"""The installed distribution: rlcore lists it as loaded with exactly its components, and its hooks stay light."""

from __future__ import annotations

import json
import subprocess
import sys

DISTRIBUTION = "rlcore-plugin-{{ cookiecutter.hyphenated }}"
#: (kind, name) of every component the plugin registers
COMPONENTS = {
{% for kind in cookiecutter._kinds if cookiecutter[kind] %}
    ("{{ kind }}", "{{ cookiecutter.hyphenated }}"),
{% endfor %}
}


def test_rlcore_plugins_lists_the_plugin() -> None:
    """``rlcore plugins --json`` (a fresh process, as a user runs it) shows the plugin ``ok`` with its components."""
    out = subprocess.run(
        [sys.executable, "-m", "rlcore", "plugins", "--json"], check=True, capture_output=True, text=True
    ).stdout
    (row,) = [row for row in json.loads(out) if row["name"] == DISTRIBUTION]
    assert row["status"] == "ok", row["error"]
    assert {(c["kind"], c["name"]) for c in row["components"]} == COMPONENTS


def test_hooks_module_does_not_import_torch() -> None:
    """Importing the entry point's module (what ``rlcore plugins`` does) imports no torch."""
    code = "import sys, rlcore_plugin_{{ cookiecutter.underscored }}.hooks; assert 'torch' not in sys.modules, 'hooks imported torch'"
    subprocess.run([sys.executable, "-c", code], check=True)
