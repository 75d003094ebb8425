"""What a worker hands a training backend: the typed model and optimizer sections of the role
(:class:`rlcore.api.training.EngineRequest`), read once from the worker's config with
:meth:`rlcore.config.sections.base.Section.from_mapping`."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from rlcore.config import load_config
from rlcore.config.schema import ModelConfig
from rlcore.config.sections.actor import OptimConfig
from rlcore.config.sections.actor_rollout_ref import FusedKernelOptions


def test_from_mapping_reads_given_fields_and_keeps_the_defaults_of_the_others() -> None:
    """Given keys (interpolations resolved, subsections typed) replace defaults; keys that are no field are
    ignored."""
    node = OmegaConf.create(
        {
            "rank": 4,
            "lora_rank": "${rank}",
            "target_modules": ["q_proj"],
            "fused_kernel_options": {"impl_backend": "triton"},
            "hf_config_path": "ignored",
        }
    )
    model = ModelConfig.from_mapping(node)
    assert model.lora_rank == 4 and model.target_modules == ["q_proj"]
    assert model.fused_kernel_options == FusedKernelOptions(impl_backend="triton")
    assert model.lora_alpha == ModelConfig.lora_alpha and model.use_liger is False
    assert OptimConfig.from_mapping({"lr": 0.5}) == OptimConfig(lr=0.5)


@pytest.fixture
def critic_worker(tiny_model_dir: Path):
    """A rank-0 critic worker (its process group released afterwards) whose value model checkpoints
    activations while the policy does not."""
    from rlcore.workers.critic import CriticWorker

    config = load_config(
        overrides=[
            f"actor_rollout_ref.model.path={tiny_model_dir}",
            "algorithm.adv_estimator=gae",
            "critic.model.enable_gradient_checkpointing=true",
            "critic.optim.lr=0.25",
        ]
    )
    worker = CriticWorker(config, "critic", 0, 1)
    yield worker
    worker.shutdown()


def test_a_critic_request_holds_the_critic_sections_typed(critic_worker, tiny_model_dir: Path) -> None:
    """The critic's model section (which declares no LoRA or kernel keys: their defaults) and its optimizer;
    a frozen role gets no optimizer."""
    request = critic_worker.engine_request("critic", "critic", "critic.model")
    assert isinstance(request.model, ModelConfig) and isinstance(request.optim, OptimConfig)
    assert request.model.path == str(tiny_model_dir)
    assert request.model.enable_gradient_checkpointing is True
    assert request.model.lora_rank == 0 and request.model.use_fused_kernels is False
    assert request.optim.lr == 0.25 and request.optim.betas == [0.9, 0.999]
    frozen = critic_worker.engine_request("ref", "actor_rollout_ref.ref", "actor_rollout_ref.model")
    assert frozen.optim is None and frozen.model.enable_gradient_checkpointing is False
