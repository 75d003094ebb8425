"""Built-in tools: a calculator and verl's GSM8K and Geometry3K answer checks (the code interpreter is
rlcore-plugin-sandbox's)."""

from __future__ import annotations

import ast
import operator
import re
from typing import Any

from rlcore.agents.tools import Tool, ToolResult

__all__ = ["AnswerCheckTool", "CalculatorTool", "Geo3kTool", "Gsm8kTool", "evaluate_arithmetic"]

_OPERATORS: dict[type, Any] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
}
#: the largest exponent and operand magnitude the calculator accepts (keeps ``9**9**9`` from hanging)
MAX_EXPONENT = 64
MAX_MAGNITUDE = 10**30


def evaluate_arithmetic(expression: str) -> int | float:
    """The value of an arithmetic ``expression`` (numbers, + - * / // % **, parentheses); ValueError otherwise."""
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as exc:
        raise ValueError(f"not an arithmetic expression: {expression!r}") from exc

    def walk(node: ast.AST) -> int | float:
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
            return node.value
        if isinstance(node, ast.UnaryOp) and type(node.op) in _OPERATORS:
            return _OPERATORS[type(node.op)](walk(node.operand))
        if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
            left, right = walk(node.left), walk(node.right)
            if isinstance(node.op, ast.Pow) and abs(right) > MAX_EXPONENT:
                raise ValueError(f"exponent {right} is larger than {MAX_EXPONENT}")
            value = _OPERATORS[type(node.op)](left, right)
            if abs(value) > MAX_MAGNITUDE:
                raise ValueError("the result is too large")
            return value
        raise ValueError(f"unsupported element {type(node).__name__} in {expression!r}")

    try:
        return walk(tree)
    except ZeroDivisionError as exc:
        raise ValueError("division by zero") from exc


class CalculatorTool(Tool):
    """``calculator(expression)``: evaluates arithmetic exactly (integers stay integers)."""

    default_schema = {
        "type": "function",
        "function": {
            "name": "calculator",
            "description": "Evaluate an arithmetic expression with + - * / // % ** and parentheses.",
            "parameters": {
                "type": "object",
                "properties": {"expression": {"type": "string", "description": "e.g. 1234*56+7"}},
                "required": ["expression"],
            },
        },
    }

    async def execute(self, instance_id: str, arguments: dict[str, Any]) -> ToolResult:
        """The value, or ``Error: ...`` for an invalid expression."""
        expression = arguments.get("expression")
        if not isinstance(expression, str):
            return ToolResult("Error: the argument 'expression' (a string) is required")
        try:
            value = evaluate_arithmetic(expression)
        except ValueError as exc:
            return ToolResult(f"Error: {exc}", metrics={"invalid": 1.0})
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        return ToolResult(str(value))


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
    graded as the geo3k scorer grades the final answer (:func:`rlcore.reward.scorers.geo3k.acc_reward`)."""

    default_schema = _answer_schema(
        "calc_geo3k_reward",
        "Check the answer to the geometry problem (1.0 if correct, 0.0 if not).",
        "the answer to the geometry problem",
    )

    def grade(self, answer: str, truth: str) -> tuple[str, bool]:
        """``answer`` boxed, graded against ``truth``."""
        from rlcore.reward.scorers.geo3k import acc_reward

        parsed = answer.strip()
        boxed = parsed if parsed.startswith("\\boxed{") else f"\\boxed{{{parsed}}}"
        return parsed, bool(parsed) and acc_reward(boxed, truth) == 1.0
