"""rlcore plugin: the ``judge`` reward manager, an LLM (a generative reward model served by a rollout engine)
that grades each response (``reward_model.reward_manager=judge``)."""

__version__ = "0.1.0"
