"""The agent loop: rlcore's contract suite runs it on the HF engine with a real chat template and checks
every trajectory with the mask audit."""

from rlcore_testkit.contracts import AgentLoopContract


class TestAgentLoopContract(AgentLoopContract):
    """rlcore's behavioural checks for ``agent.default_agent_loop={{ cookiecutter.hyphenated }}``."""

    component_name = "{{ cookiecutter.hyphenated }}"
