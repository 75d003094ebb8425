"""The tool-call parser ``{{ cookiecutter.hyphenated }}`` (``actor_rollout_ref.rollout.multi_turn.format={{ cookiecutter.hyphenated }}``).

What it does: reads calls written as ``<call name="calculator">{"expression": "1+2"}</call>``. A call whose
JSON does not parse is returned with ``error`` set: rlcore answers it with an error message to the model
and counts it in ``tool/malformed``, and the trajectory goes on.

What to change: the pattern and :meth:`TagParser.parse`. Never raise on model output.
``tests/test_tool_parser.py`` runs rlcore's contract suite.
"""

from __future__ import annotations

import json
import re

from rlcore.api import ToolCall

_CALL = re.compile(r'<call name="([^"]+)">(.*?)</call>', re.DOTALL)


class TagParser:
    """``<call name="NAME">{json arguments}</call>`` blocks."""

    def parse(self, text: str) -> list[ToolCall]:
        """Every call in ``text``; malformed arguments become a call with ``error``."""
        calls = []
        for name, body in _CALL.findall(text):
            try:
                arguments = json.loads(body)
            except json.JSONDecodeError as exc:
                calls.append(ToolCall(name, error=f"arguments are not valid JSON ({exc.msg})"))
                continue
            if not isinstance(arguments, dict):
                calls.append(ToolCall(name, error="arguments must be a JSON object"))
                continue
            calls.append(ToolCall(name, arguments))
        return calls
