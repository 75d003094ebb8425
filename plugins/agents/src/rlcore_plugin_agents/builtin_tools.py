"""Built-in tools: a calculator (verl's GSM8K and Geometry3K answer checks are rlcore-plugin-tasks', the code
interpreter is rlcore-plugin-sandbox's)."""

from __future__ import annotations

import ast
import operator
from typing import Any

from rlcore.api import Tool, ToolResult

__all__ = ["CalculatorTool", "evaluate_arithmetic"]

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
