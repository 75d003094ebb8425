"""The tool: what it answers, and rlcore's contract suite."""

from __future__ import annotations

import asyncio

from rlcore_testkit.contracts import ToolContract
from rlcore_plugin_{{ cookiecutter.underscored }}.tool import WordCountTool


def test_counts_words() -> None:
    result = asyncio.run(WordCountTool().execute("t", {"text": "one two  three"}))
    assert result.text == "3"
    assert asyncio.run(WordCountTool().execute("t", {})).text.startswith("Error")


class TestToolContract(ToolContract):
    """rlcore's behavioural checks for ``class_name: {{ cookiecutter.hyphenated }}``."""

    component_name = "{{ cookiecutter.hyphenated }}"
    example_arguments = {"text": "count these words"}
