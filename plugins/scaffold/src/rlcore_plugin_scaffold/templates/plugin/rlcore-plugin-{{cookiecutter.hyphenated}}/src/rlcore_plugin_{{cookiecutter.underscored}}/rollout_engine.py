"""The rollout engine ``{{ cookiecutter.hyphenated }}`` (``actor_rollout_ref.rollout.name={{ cookiecutter.hyphenated }}``).

What it does: wraps the engine registered as :data:`BASE_ENGINE` (rlcore's built-in ``hf`` engine),
resolved through the plugin registry, and forwards every call to it. That makes it a working engine from
the start and shows the whole interface a training backend uses (``docs/architecture.md`` in rlcore).

What to change: to add behaviour around generation (prompt rewriting, response post-processing,
multi-turn tool calls), edit :meth:`RolloutEngine.generate`. To serve another inference library, replace
the wrapped engine by your own: load the model in ``__init__``, sample in ``generate`` (left-padded
prompts in, right-padded responses plus masks out), load pushed weights in ``update_weights`` and bump
``weight_version``, and make ``weight_checksum`` report the weights actually served — the backend compares
it with the trainer's after every sync. ``tests/test_rollout_engine.py`` runs rlcore's contract suite on it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rlcore import get_component
from rlcore.api import RolloutConfig

#: the registered rollout engine this one wraps
BASE_ENGINE = "hf"


class RolloutEngine:
    """Generation through the :data:`BASE_ENGINE` engine.

    Args:
        model_path: the policy's model directory (or hub name).
        tokenizer: the policy's tokenizer.
        config: the typed ``actor_rollout_ref.rollout`` section (a :attr:`config_class`), built by the worker.
        **options: what the backend passes on (``device``, ``dtype``), handed to the wrapped engine.
    """

    #: the typed section the worker builds this engine with (subclass RolloutConfig to add your own keys)
    config_class = RolloutConfig

    def __init__(self, model_path: str, tokenizer: Any, config: RolloutConfig, **options: Any) -> None:
        self.engine = get_component("rollout_engine", BASE_ENGINE)(model_path, tokenizer, config, **options)

    @property
    def weight_version(self) -> int:
        """How many weight updates the engine has served (0 = the initial weights)."""
        return self.engine.weight_version

    def generate(self, batch: Any, validate: bool = False) -> Any:
        """One response per prompt row of ``batch``; ``validate`` selects the validation sampling settings."""
        return self.engine.generate(batch, validate=validate)

    def update_weights(self, named_tensors: Iterable[tuple[str, Any]]) -> None:
        """Load the trainer's weights (``(name, tensor)`` pairs) into the served model."""
        self.engine.update_weights(named_tensors)

    def weight_checksum(self) -> float:
        """A checksum of the weights being served, compared with the trainer's after each sync."""
        return self.engine.weight_checksum()

    def sleep(self) -> None:
        """Release memory between generations (the trainer uses the device meanwhile)."""
        self.engine.sleep()

    def wake(self) -> None:
        """Take the memory back before the next generation."""
        self.engine.wake()

    def __getattr__(self, name: str) -> Any:
        """Optional extras of the wrapped engine (``uncounted_names``, ``state_dict``, ...)."""
        if name == "engine":  # not constructed yet: no recursion through __getattr__
            raise AttributeError(name)
        return getattr(self.engine, name)
