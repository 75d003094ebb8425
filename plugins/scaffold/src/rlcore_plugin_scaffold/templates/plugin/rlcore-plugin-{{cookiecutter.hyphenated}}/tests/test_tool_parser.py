"""The tool-call parser: malformed calls, and rlcore's contract suite."""

from rlcore_testkit.contracts import ToolParserContract
from rlcore_plugin_{{ cookiecutter.underscored }}.tool_parser import TagParser


def test_malformed_arguments_become_an_error_call() -> None:
    (call,) = TagParser().parse('<call name="calculator">{"expression": </call>')
    assert call.name == "calculator" and call.error is not None


class TestToolParserContract(ToolParserContract):
    """rlcore's behavioural checks for ``multi_turn.format={{ cookiecutter.hyphenated }}``."""

    component_name = "{{ cookiecutter.hyphenated }}"
    example_text = 'Let me compute. <call name="calculator">{"expression": "1+2"}</call>'
