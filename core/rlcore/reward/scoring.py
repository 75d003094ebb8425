"""Build the scorer and the reward manager of a run from its config."""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rlcore.config.sections.reward_model import CustomRewardFunctionConfig, RewardModelConfig
from rlcore.reward.errors import RewardError
from rlcore.reward.torch_state import restore_torch_state
from rlcore.usercode import user_call

if TYPE_CHECKING:
    from rlcore.config.schema import Sections
    from rlcore.registry import Registry


class RegistryScorer:
    """Dispatch each sample to the ``reward_scorer`` component registered for its ``data_source``.

    Lookups are cached per data source. An unknown data source raises the registry's
    :class:`~rlcore.registry.UnknownComponentError` (listing the known scorers): data without a scorer
    is a configuration error, not a zero reward.
    """

    def __init__(self, registry: Registry) -> None:
        """``registry``: the run's :class:`rlcore.registry.Registry` (``rlcore run`` passes its plugin manager's)."""
        self.registry = registry
        self._cache: dict[str, Callable[..., Any]] = {}

    def has(self, data_source: str) -> bool:
        """Whether a ``reward_scorer`` is registered for ``data_source`` (or one of its aliases)."""
        return self.registry.has("reward_scorer", data_source)

    def compares_text(self, data_source: str) -> bool:
        """Whether the scorer of ``data_source`` compares the ground truth as text (registered with
        ``RewardScorerSpec(ground_truth="text")``): the reward manager then passes it as text (:mod:`rlcore.reward.ground_truth`).
        False for an unknown data source (scoring reports it)."""
        if not self.has(data_source):
            return False
        return self.registry.spec("reward_scorer", data_source).ground_truth == "text"

    def resolve(self, data_source: str) -> Callable[..., Any]:
        """The scorer registered for ``data_source`` (or one of its aliases)."""
        scorer = self._cache.get(data_source)
        if scorer is None:
            scorer = self._cache[data_source] = self.registry.load("reward_scorer", data_source)
        return scorer

    def __call__(self, data_source: str, solution_str: str, ground_truth: Any, extra_info: dict | None = None) -> Any:
        """Score one sample with its data source's scorer."""
        return self.resolve(data_source)(data_source, solution_str, ground_truth, extra_info)


def _run_coroutine_function(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap an ``async def`` scorer so that each call runs it to completion in a fresh event loop."""

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        return asyncio.run(fn(*args, **kwargs))

    return run


def build_scorer(custom: CustomRewardFunctionConfig, registry: Registry) -> Callable[..., Any]:
    """The scorer of a run (``custom`` is its ``custom_reward_function`` section, ``registry`` the run's registry).

    With ``custom_reward_function.path`` set, the function ``custom_reward_function.name`` is loaded from
    that .py file, with ``custom_reward_function.reward_kwargs`` bound as keyword arguments (an
    ``async def`` function is run to completion per call; the import runs as a call of user code:
    ``os._exit()`` in it is an error naming the line, the torch switches it sets are set back, the processes
    it leaves running are killed with the run). Otherwise a :class:`RegistryScorer` dispatches
    on each sample's ``data_source`` through ``registry``.
    """
    from rlcore.config.sections.base import to_plain
    from rlcore.data.custom import load_from_file

    path = custom.path
    if not path:
        return RegistryScorer(registry)
    name = custom.name or CustomRewardFunctionConfig.name
    what = f"custom_reward_function.path={path!r} (importing the file)"
    with user_call(what), restore_torch_state(what):  # os._exit() at import is named, helpers it starts tracked
        fn = load_from_file(path, name, what="custom_reward_function", error_cls=RewardError)
    if not callable(fn):
        raise RewardError(f"custom_reward_function: {name!r} in {path!r} is a {type(fn).__name__}, not a function")
    if inspect.iscoroutinefunction(fn):
        fn = _run_coroutine_function(fn)
    kwargs = dict(to_plain(custom.reward_kwargs or {}))
    return functools.partial(fn, **kwargs) if kwargs else fn


def describe_scorer(custom: CustomRewardFunctionConfig) -> str:
    """The scorer of a run for messages (``custom``: its ``custom_reward_function`` section):
    ``custom_reward_function 'compute_score' in reward.py``, or ``the reward scorer of the data source``
    (registered by ``data_source``)."""
    if custom.path:
        return f"custom_reward_function {custom.name or CustomRewardFunctionConfig.name!r} in {custom.path}"
    return "the reward scorer of the data source"


def build_reward_manager(
    sections: Sections, reward_model: RewardModelConfig, tokenizer: Any, cls: Any, registry: Registry
) -> Any:
    """The reward manager of a run: ``cls`` (the class ``rlcore run`` resolved once,
    :attr:`rlcore.controller.components.RunComponents.reward_manager`) constructed as
    ``cls(tokenizer, build_scorer(sections.custom_reward_function, registry), reward_model)``, where
    ``reward_model`` is the typed ``reward_model`` section with the plugins' fields there (what reward-manager
    classes receive: :func:`rlcore.config.plugin_sections.plugin_section`).

    A manager class with ``batched = True`` calls one function for the whole batch, which only a custom
    reward function can be, so it requires ``custom_reward_function.path``.
    """
    custom = sections.custom_reward_function
    if getattr(cls, "batched", False) and not custom.path:
        name = sections.reward_model.reward_manager
        raise RewardError(
            f"reward_model.reward_manager={name!r} calls one batched scoring function "
            "(data_sources=, solution_strs=, ground_truths=, extra_infos=); set custom_reward_function.path "
            "(and .name) to a file defining it, or use reward_model.reward_manager=naive"
        )
    return cls(tokenizer, build_scorer(custom, registry), reward_model)
