"""``actor_rollout_ref.rollout.cudagraph_capture_sizes`` (verl's key) as vLLM's
``compilation_config.cudagraph_capture_sizes``: the engine argument, without starting vLLM."""

from __future__ import annotations

from typing import Any

import pytest

from rlcore.config import ConfigError

SIZES = "actor_rollout_ref.rollout.cudagraph_capture_sizes"


def section(plugin_manager: Any, *overrides: str) -> Any:
    """The vllm engine's typed rollout section with ``overrides``."""
    from rlcore_plugin_vllm.config import VLLMRolloutConfig

    from rlcore.config import load_config

    return VLLMRolloutConfig.from_tree(load_config(overrides=list(overrides), manager=plugin_manager))


def test_capture_sizes_join_the_compilation_config(plugin_manager: Any) -> None:
    """The sizes are set over a ``compilation_config`` of ``vllm.engine_kwargs`` (a dict or its JSON, as verl
    takes it), only when graphs are captured; unset, vLLM's own sizes stay."""
    sized = section(plugin_manager, f"{SIZES}=[8,16,32]")
    assert sized.compilation_config(None, graphs=True) == {"cudagraph_capture_sizes": [8, 16, 32]}
    given = {"cudagraph_mode": "FULL_DECODE_ONLY", "cudagraph_capture_sizes": [1]}
    assert sized.compilation_config(given, graphs=True) == {
        "cudagraph_mode": "FULL_DECODE_ONLY",
        "cudagraph_capture_sizes": [8, 16, 32],
    }
    assert sized.compilation_config('{"cudagraph_mode": "PIECEWISE"}', graphs=True) == {
        "cudagraph_mode": "PIECEWISE",
        "cudagraph_capture_sizes": [8, 16, 32],
    }
    assert sized.compilation_config(given, graphs=False) is None
    assert section(plugin_manager).compilation_config(given, graphs=True) is None


@pytest.mark.parametrize("value", ["[]", "[0,8]", "[true]", "8", "[8.5]"])
def test_bad_capture_sizes_name_the_key(plugin_manager: Any, value: str) -> None:
    """Anything but null or a non-empty list of batch sizes >= 1 is an error naming the key."""
    with pytest.raises(ConfigError, match=f"{SIZES} must be null or a non-empty list of batch sizes"):
        section(plugin_manager, f"{SIZES}={value}")
