"""``actor_rollout_ref.rollout.cudagraph_capture_sizes``: what each rollout engine accepts, checked before anything
starts (``check_values``, the dry run), and the plan's note where no CUDA graph is captured. The engines' use of it
is tested in their plugins (vLLM: ``compilation_config``; SGLang: ``cuda_graph_bs``)."""

from __future__ import annotations

import pytest

from rlcore.config import ConfigError, check_values, derive_quantities, load_config
from rlcore.config.cuda_graphs import CAPTURE_KEY

ROLLOUT = "actor_rollout_ref.rollout"


def config_with(*overrides: str) -> object:
    """The run config with ``overrides`` (a model path, so that it validates)."""
    return load_config(overrides=["actor_rollout_ref.model.path=m", *overrides])


def notes(config: object) -> list[str]:
    """The plan's notes about the capture sizes."""
    return [note for note in derive_quantities(config).notes if CAPTURE_KEY in note]


def test_the_hf_engine_refuses_a_list_naming_the_key() -> None:
    """hf captures its graphs per batch-size bucket of its own: a list is an error; null is accepted."""
    with pytest.raises(ConfigError, match=r"cudagraph_capture_sizes=\[8, 16\]: the hf rollout engine captures"):
        check_values(config_with(f"{CAPTURE_KEY}=[8,16]"))
    check_values(config_with(f"{CAPTURE_KEY}=null"))


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_vllm_and_sglang_take_it_on_cuda_without_a_note(engine: str) -> None:
    config = config_with(f"{ROLLOUT}.name={engine}", f"{CAPTURE_KEY}=[8,16]", "trainer.device=cuda")
    check_values(config)
    assert notes(config) == []


@pytest.mark.parametrize(
    ("overrides", "why"),
    [
        ([f"{ROLLOUT}.enforce_eager=true", "trainer.device=cuda"], "enforce_eager=true captures no CUDA graph"),
        (["trainer.device=cpu"], "changes nothing on the CPU"),
    ],
    ids=["eager", "cpu"],
)
def test_where_no_graph_is_captured_the_plan_says_it_changes_nothing(overrides: list[str], why: str) -> None:
    config = config_with(f"{ROLLOUT}.name=vllm", f"{CAPTURE_KEY}=[8,16]", *overrides)
    check_values(config)
    assert len(notes(config)) == 1 and why in notes(config)[0]
