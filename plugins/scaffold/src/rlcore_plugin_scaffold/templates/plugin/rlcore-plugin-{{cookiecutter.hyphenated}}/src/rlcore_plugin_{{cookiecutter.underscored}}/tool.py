"""The tool ``{{ cookiecutter.underscored }}`` (multi-turn rollouts: ``class_name: {{ cookiecutter.hyphenated }}`` in the tool YAML).

What it does: counts the words of a text the model passes as ``{"text": ...}``. The model calls it with
``<tool_call>{"name": "{{ cookiecutter.underscored }}", "arguments": {"text": "..."}}</tool_call>`` (the Hermes
format); rlcore runs the call, cuts a long answer to ``multi_turn.max_tool_response_length`` characters
and appends it to the trajectory as a tool turn (``response_mask`` 0). rlcore times every call out after the
YAML's ``config.timeout`` seconds (default 30) and turns an exception into an error message for the model,
but a good tool answers bad arguments with a message itself.

Use it: a tool YAML (verl's format) at ``actor_rollout_ref.rollout.multi_turn.tool_config_path``::

    tools:
      - class_name: {{ cookiecutter.hyphenated }}
        config: {timeout: 5}

What to change: :meth:`WordCountTool.execute` (keep it ``async``: run blocking work with
``asyncio.to_thread``), the schema, and :meth:`create`/:meth:`release` if the tool keeps per-trajectory
state. ``tests/test_tool.py`` runs rlcore's contract suite on it.
"""

from __future__ import annotations

from typing import Any

from rlcore.api import Tool, ToolResult


class WordCountTool(Tool):
    """``{{ cookiecutter.underscored }}(text)``: the number of words in ``text``."""

    default_schema = {
        "type": "function",
        "function": {
            "name": "{{ cookiecutter.underscored }}",
            "description": "Count the words of a text.",
            "parameters": {
                "type": "object",
                "properties": {"text": {"type": "string", "description": "the text"}},
                "required": ["text"],
            },
        },
    }

    async def execute(self, instance_id: str, arguments: dict[str, Any]) -> ToolResult:
        """The word count, or an error message when ``text`` is missing."""
        text = arguments.get("text")
        if not isinstance(text, str):
            return ToolResult("Error: the argument 'text' (a string) is required")
        return ToolResult(str(len(text.split())), metrics={"words": float(len(text.split()))})
