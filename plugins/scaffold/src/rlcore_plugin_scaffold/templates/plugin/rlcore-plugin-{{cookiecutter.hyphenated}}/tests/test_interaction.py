"""The interaction: its rewards, and rlcore's contract suite."""

from __future__ import annotations

import asyncio

from rlcore_testkit.contracts import InteractionContract
from rlcore_plugin_{{ cookiecutter.underscored }}.interaction import ExpectsAnswer


def test_ends_the_episode_when_the_answer_appears() -> None:
    user = ExpectsAnswer()

    async def episode(reply: str):
        await user.start("e", expected="42")
        turn = await user.respond("e", [{"role": "assistant", "content": reply}])
        await user.finish("e")
        return turn

    assert asyncio.run(episode("it is 42")).done
    assert asyncio.run(episode("it is 41")).reward == 0.0


class TestInteractionContract(InteractionContract):
    """rlcore's behavioural checks for ``class_name: {{ cookiecutter.hyphenated }}``."""

    component_name = "{{ cookiecutter.hyphenated }}"
    interaction_kwargs = {"expected": "3"}
