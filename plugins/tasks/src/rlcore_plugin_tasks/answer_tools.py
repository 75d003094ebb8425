"""verl's GSM8K and Geometry3K answer-check tools (``calc_gsm8k_reward``, ``calc_geo3k_reward``), registered as
``gsm8k`` and ``geo3k`` with verl's class paths as aliases, so verl's tool YAML files load unchanged."""

from __future__ import annotations

import re
from typing import Any

from rlcore.api import Tool, ToolResult

__all__ = ["AnswerCheckTool", "Geo3kTool", "Gsm8kTool"]

_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


class AnswerCheckTool(Tool):
    """A tool that checks the model's ``answer`` against the trajectory's ground truth (given to ``create``
    as ``ground_truth``: ``tools_kwargs.<tool>.create_kwargs.ground_truth``); step reward 1.0 when right,
    else 0. Subclasses grade with :meth:`grade`."""

    def __init__(self, config: Any = None, tool_schema: Any = None) -> None:
        super().__init__(config, tool_schema)
        self._truth: dict[str, str] = {}

    async def create(self, instance_id: str, **kwargs: Any) -> None:
        """Remember the trajectory's ground truth."""
        self._truth[instance_id] = str(kwargs.get("ground_truth", "")).strip()

    def grade(self, answer: str, truth: str) -> tuple[str, bool]:
        """The answer as parsed and whether it equals ``truth``."""
        raise NotImplementedError

    async def execute(self, instance_id: str, arguments: dict[str, Any]) -> ToolResult:
        """Grade the answer against the ground truth."""
        answer, correct = self.grade(str(arguments.get("answer", "")), self._truth.get(instance_id, ""))
        return ToolResult(f"Current parsed answer={answer!r} result={1.0 if correct else 0.0}", reward=float(correct))

    async def release(self, instance_id: str) -> None:
        """Forget the trajectory."""
        self._truth.pop(instance_id, None)


def _answer_schema(name: str, description: str, answer: str) -> dict[str, Any]:
    """verl's schema of an answer-check tool ``name(answer)``."""
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": {"answer": {"type": "string", "description": answer}},
                "required": ["answer"],
            },
        },
    }


class Gsm8kTool(AnswerCheckTool):
    """verl's GSM8K tool ``calc_gsm8k_reward(answer)``: the answer's last number against the ground truth."""

    default_schema = _answer_schema(
        "calc_gsm8k_reward",
        "Check the answer to the math problem (1.0 if correct, 0.0 if not).",
        "the answer, digits only",
    )

    def grade(self, answer: str, truth: str) -> tuple[str, bool]:
        """The last number of ``answer`` (commas dropped) equals ``truth``."""
        numbers = _NUMBER.findall(answer)
        parsed = numbers[-1].replace(",", "") if numbers else ""
        return parsed, bool(parsed) and parsed == truth


class Geo3kTool(AnswerCheckTool):
    """verl's Geometry3K tool ``calc_geo3k_reward(answer)``: the answer (put in ``\\boxed{}`` when it is not)
    graded as the geo3k scorer grades the final answer (:func:`rlcore_plugin_tasks.scorers.geo3k.acc_reward`)."""

    default_schema = _answer_schema(
        "calc_geo3k_reward",
        "Check the answer to the geometry problem (1.0 if correct, 0.0 if not).",
        "the answer to the geometry problem",
    )

    def grade(self, answer: str, truth: str) -> tuple[str, bool]:
        """``answer`` boxed, graded against ``truth``."""
        from rlcore_plugin_tasks.scorers.geo3k import acc_reward

        parsed = answer.strip()
        boxed = parsed if parsed.startswith("\\boxed{") else f"\\boxed{{{parsed}}}"
        return parsed, bool(parsed) and acc_reward(boxed, truth) == 1.0
