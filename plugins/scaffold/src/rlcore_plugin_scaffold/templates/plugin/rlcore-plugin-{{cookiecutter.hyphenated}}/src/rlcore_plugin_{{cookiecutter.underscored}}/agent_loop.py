"""The agent loop ``{{ cookiecutter.hyphenated }}`` (``actor_rollout_ref.rollout.agent.default_agent_loop={{ cookiecutter.hyphenated }}``,
or ``"agent_name": "{{ cookiecutter.hyphenated }}"`` on a sample).

What it does: answers, then is asked to check its answer and answers again (two assistant turns). The
trajectory is token-in, token-out: the first answer's tokens stay exactly as generated, and the follow-up
question is rendered alone through the model's chat template (``context.renderer.continuation_ids``) and
appended with ``response_mask`` 0. ``context.generate`` is batched with the other samples' turns.

What to change: the follow-up message and the number of rounds in :meth:`CheckAgainLoop.run`. Keep the
rules: append only what the policy generated with ``add_generated`` and everything else with
``add_observation``, and stop within ``context.settings.response_length`` tokens. ``tests/test_agent_loop.py``
runs rlcore's contract suite, which checks every trajectory with the mask audit.
"""

from __future__ import annotations

from rlcore.api import AgentContext, AgentSample, Trajectory

FOLLOW_UP = "Check your answer and give it again."


class CheckAgainLoop:
    """Answer; be asked to check; answer again."""

    def __init__(self, context: AgentContext) -> None:
        self.context = context

    async def run(self, sample: AgentSample) -> Trajectory:
        """Two assistant turns separated by the follow-up question."""
        budget = self.context.settings.response_length
        trajectory = Trajectory(list(sample.prompt_ids))
        turn = await self.context.generate(trajectory.context)
        trajectory.add_generated(turn.token_ids[:budget], turn.log_probs)
        if not turn.finished or len(trajectory.response_ids) >= budget:
            return trajectory
        question = self.context.renderer.continuation_ids([{"role": "user", "content": FOLLOW_UP}])
        trajectory.add_observation(question)
        if len(trajectory.response_ids) >= budget:
            return trajectory
        turn = await self.context.generate(trajectory.context)
        trajectory.add_generated(turn.token_ids[: budget - len(trajectory.response_ids)], turn.log_probs)
        return trajectory
