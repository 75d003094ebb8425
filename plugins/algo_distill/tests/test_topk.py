"""``forward_kl_topk``: the loss and its gradient against a direct computation from full logits, the engines'
log-probs at given ids and top-k against a plain transformers forward (FSDP, DeepSpeed, Megatron), the teacher's
top-k, and a 2-step run with a tiny teacher and student."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from rlcore_plugin_distill.loss import TEACHER_TOPK_LOG_PROBS, distillation_loss
from rlcore_plugin_distill.settings import LossSettings
from rlcore_plugin_distill.worker import TeacherWorker
from rlcore_testkit.contracts.backend import TrainingBackendContract, make_batch
from rlcore_testkit.runs import make_tiny_task, tiny_run

from rlcore.api.batch import Batch
from rlcore.api.training import GATHER_IDS, GATHERED_LOG_PROBS
from rlcore.config import load_config
from rlcore.errors import RLCoreError
from rlcore.tracking.sinks import read_metrics

#: GKD-style forward_kl_topk as verl's Megatron example sets it (k=4 here, log-prob floor −3: some entries clamp)
TOPK = LossSettings("forward_kl_topk", False, 1.0, None, False, 0.2, 0.2, 0.2, topk=4, log_prob_min_clamp=-3.0)


def full_logits(model_dir: Path, batch: Batch, temperature: float) -> torch.Tensor:
    """``[B, R, V]`` tempered logits before each response token by a plain transformers forward, one row at a
    time without padding (0 on response padding)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    rows, width = batch["responses"].shape
    out = torch.zeros(rows, width, model.config.vocab_size)
    for i in range(rows):
        ids = batch["input_ids"][i][batch["attention_mask"][i].bool()]
        length = int(batch["response_mask"][i].sum())
        with torch.no_grad():
            logits = model(ids.unsqueeze(0)).logits[0].float()
        prompt = len(ids) - length
        out[i, :length] = logits[prompt - 1 : len(ids) - 1] / temperature
    return out


def test_the_loss_and_its_gradient_equal_the_forward_kl_over_the_teachers_top_k() -> None:
    """d_t = Σ_k π_T (max(log π_T, c) − max(log π_S, c)) over the teacher's top-k, clamped at 0, token-mean;
    the gradient with respect to the student's logits is m·p − q·1[A] per token, A the top-k entries whose
    student log-prob is above the floor, q the floored teacher's probabilities there and m their sum (verl's
    formula), divided by the number of valid tokens."""
    torch.manual_seed(0)
    rows, width, vocab, k = 3, 5, 11, TOPK.topk
    student_logits = (torch.randn(rows, width, vocab) * 2).requires_grad_(True)
    teacher_log_probs = torch.log_softmax(torch.randn(rows, width, vocab) * 2, dim=-1)
    teacher_topk, ids = teacher_log_probs.topk(k, dim=-1)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]])
    student_full = torch.log_softmax(student_logits, dim=-1)
    micro = Batch.from_dict(
        {
            "response_mask": mask,
            GATHER_IDS: ids,
            TEACHER_TOPK_LOG_PROBS: teacher_topk,
            GATHERED_LOG_PROBS: student_full.gather(-1, ids),
        }
    )
    loss, metrics = distillation_loss(torch.zeros(rows, width), micro, TOPK, "token-mean", None)

    floor = TOPK.log_prob_min_clamp
    expected = torch.zeros(rows, width)
    for b in range(rows):
        for t in range(width):
            for j in range(k):
                q = max(float(teacher_topk[b, t, j]), floor)
                p = max(float(student_full[b, t, ids[b, t, j]].detach()), floor)
                expected[b, t] += math.exp(q) * (q - p)
    expected = expected.clamp_min(0)
    valid = mask.bool()
    assert loss.item() == pytest.approx(expected[valid].mean().item(), rel=1e-5)
    assert metrics["actor/distillation/loss"] == pytest.approx(loss.item())
    assert metrics["actor/distillation/loss_max"] == pytest.approx(expected[valid].max().item(), rel=1e-5)
    student_mass = student_full.detach().gather(-1, ids).exp().sum(-1)[valid]
    assert metrics["actor/distillation/student_mass"] == pytest.approx(student_mass.mean().item(), rel=1e-5)
    assert metrics["actor/distillation/student_mass_min"] == pytest.approx(student_mass.min().item(), rel=1e-5)
    assert metrics["actor/distillation/teacher_mass_max"] == pytest.approx(
        teacher_topk.exp().sum(-1)[valid].max().item(), rel=1e-5
    )
    assert "actor/distillation/abs_loss" not in metrics

    loss.backward()
    probs = student_full.detach().exp()
    active = student_full.detach().gather(-1, ids) > floor  # a floored student log-prob passes no gradient
    weights = teacher_topk.clamp_min(floor).exp() * active  # the floored teacher's probabilities, where active
    checked = 0
    for b, t in zip(*torch.nonzero(valid, as_tuple=True), strict=True):
        if expected[b, t] <= 0:
            continue
        q = torch.zeros(vocab).index_add_(0, ids[b, t], weights[b, t])
        grad = (q.sum() * probs[b, t] - q) / valid.sum()
        torch.testing.assert_close(student_logits.grad[b, t], grad, atol=1e-6, rtol=1e-5)
        checked += 1
    assert checked >= 4 and bool((~active[valid]).any()), "the example must hold floored and free entries"
    assert torch.all(student_logits.grad[~valid] == 0)
    clamped = (expected == 0) & valid
    assert torch.all(student_logits.grad[clamped] == 0)


def test_top_k_entries_of_padding_ids_are_left_out_of_the_loss() -> None:
    """An entry whose teacher log-prob is ``-inf`` (a padding id of a teacher padded past the student) adds
    nothing to d_t, the masses or the gradient: the result equals the loss over the other entries alone."""
    torch.manual_seed(1)
    rows, width, vocab, k = 2, 3, 9, TOPK.topk
    student_logits = (torch.randn(rows, width, vocab) * 2).requires_grad_(True)
    teacher_topk, ids = torch.log_softmax(torch.randn(rows, width, vocab) * 2, dim=-1).topk(k, dim=-1)
    dropped = torch.zeros(rows, width, k, dtype=torch.bool)
    dropped[0, 1, 0] = dropped[1, 2, 1:] = True  # the most likely entry of one position, all but one of another
    mask = torch.ones(rows, width, dtype=torch.long)

    def loss_of(teacher: torch.Tensor, student: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
        micro = Batch.from_dict(
            {"response_mask": mask, GATHER_IDS: ids, TEACHER_TOPK_LOG_PROBS: teacher, GATHERED_LOG_PROBS: student}
        )
        return distillation_loss(torch.zeros(rows, width), micro, TOPK, "token-mean", None)

    student = torch.log_softmax(student_logits, dim=-1).gather(-1, ids)
    loss, metrics = loss_of(teacher_topk.masked_fill(dropped, float("-inf")), student)
    loss.backward()
    grad = student_logits.grad.clone()
    student_logits.grad = None
    # the same without those entries: a teacher log-prob so low that it weighs nothing, a student one at the floor
    student = torch.log_softmax(student_logits, dim=-1).gather(-1, ids)
    kept_student = torch.where(dropped, torch.full_like(student, -1e4), student)
    expected, expected_metrics = loss_of(teacher_topk.masked_fill(dropped, -1e4), kept_student)
    expected.backward()
    assert loss.item() == pytest.approx(expected.item(), rel=1e-6)
    for name in ("student_mass", "teacher_mass", "loss_max"):
        assert metrics[f"actor/distillation/{name}"] == pytest.approx(expected_metrics[f"actor/distillation/{name}"])
    assert torch.isfinite(grad).all()
    torch.testing.assert_close(grad, student_logits.grad)


def test_the_loss_max_clamp_and_the_surrogate() -> None:
    """``loss_max_clamp`` caps d_t (the range metrics are of d_t before it); with ``use_policy_gradient`` the
    surrogate's advantage is −d_t at ratio 1."""
    torch.manual_seed(1)
    student = torch.log_softmax(torch.randn(2, 3, 7) * 3, dim=-1)
    teacher, ids = torch.log_softmax(torch.randn(2, 3, 7) * 3, dim=-1).topk(3, dim=-1)
    micro = Batch.from_dict(
        {
            "response_mask": torch.ones(2, 3),
            GATHER_IDS: ids,
            TEACHER_TOPK_LOG_PROBS: teacher,
            GATHERED_LOG_PROBS: student.gather(-1, ids),
            "old_log_probs": torch.full((2, 3), -1.0),
        }
    )
    plain = (teacher.exp() * (teacher - student.gather(-1, ids))).sum(-1).clamp_min(0)
    cap = float(plain.max()) / 2
    settings = LossSettings("forward_kl_topk", False, 1.0, cap, False, 0.2, 0.2, 0.2, topk=3)
    loss, metrics = distillation_loss(torch.full((2, 3), -1.0), micro, settings, "token-mean", None)
    assert loss.item() == pytest.approx(plain.clamp_max(cap).mean().item(), rel=1e-5)
    assert metrics["actor/distillation/loss_max"] == pytest.approx(plain.max().item(), rel=1e-5)
    pg = LossSettings("forward_kl_topk", False, 1.0, None, True, 0.2, 0.2, 0.2, topk=3)
    loss, metrics = distillation_loss(torch.full((2, 3), -1.0), micro, pg, "token-mean", None)
    assert loss.item() == pytest.approx(plain.mean().item(), rel=1e-5)
    assert metrics["actor/distillation/pg_clipfrac"] == 0.0


class FSDPSettings(TrainingBackendContract):
    """The contract's small config for the ``fsdp`` backend (not a test class)."""

    component_name = "fsdp"


class DeepSpeedSettings(TrainingBackendContract):
    """The contract's small config for the ``deepspeed`` backend (not a test class)."""

    component_name = "deepspeed"


class MegatronSettings(TrainingBackendContract):
    """The contract's small config for the ``megatron`` backend (not a test class)."""

    component_name = "megatron"


BACKENDS: dict[str, tuple[type[TrainingBackendContract], dict[str, Any]]] = {
    "fsdp": (FSDPSettings, {}),
    "fsdp-packed": (FSDPSettings, {"actor_rollout_ref.model.use_remove_padding": True}),
    "deepspeed": (DeepSpeedSettings, {}),
    "megatron": (MegatronSettings, {}),
}


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_engines_return_log_probs_at_ids_and_the_top_k(backend: str, tiny_model_dir: Path, tiny_tokenizer) -> None:
    """``forward`` with a batch's ``gather_ids`` and ``top_k`` equals log_softmax(logits / T) of a plain
    transformers forward, read at the ids and sorted; ``forward_backward`` gives the same values with gradients."""
    settings, overrides = BACKENDS[backend]
    batch = make_batch(tiny_tokenizer)
    logits = full_logits(tiny_model_dir, batch, temperature=0.7)
    ids = torch.randint(0, logits.shape[-1], (*batch["responses"].shape, 5), generator=torch.Generator().manual_seed(0))
    batch[GATHER_IDS] = ids
    expected = torch.log_softmax(logits, dim=-1)
    valid = batch["response_mask"].bool()
    worker = settings.make_actor(tiny_model_dir, role="actor", **overrides)
    try:
        engine = worker.actor
        with engine.resident():
            (out,) = engine.forward([batch], temperature=0.7, with_entropy=False, top_k=3)
            seen: list[torch.Tensor] = []

            def loss_fn(_: int, micro: Batch, output: Any) -> torch.Tensor:
                seen.append(output.gathered_log_probs)
                return -(output.gathered_log_probs * micro["response_mask"][..., None]).sum()

            engine.forward_backward([batch], loss_fn, temperature=0.7, with_entropy=False)
            assert engine.optimizer_step(None) > 0
    finally:
        settings.close(worker)
    torch.testing.assert_close(out.gathered_log_probs.cpu()[valid], expected.gather(-1, ids)[valid], atol=1e-4, rtol=0)
    top, top_ids = expected.topk(3, dim=-1)
    torch.testing.assert_close(out.top_k_log_probs.cpu()[valid], top[valid], atol=1e-4, rtol=0)
    assert torch.equal(out.top_k_ids.cpu()[valid], top_ids[valid])
    assert seen[0].requires_grad
    torch.testing.assert_close(seen[0].detach().cpu()[valid], expected.gather(-1, ids)[valid], atol=1e-4, rtol=0)


def topk_config(student: Path, teacher: Path, topk: int) -> Any:
    """A CPU config distilling ``teacher`` into ``student`` with ``forward_kl_topk`` (validated)."""
    from rlcore.plugins import load_plugins

    config = load_config(
        [],
        [
            f"actor_rollout_ref.model.path={student}",
            "trainer.device=cpu",
            "distillation.enabled=true",
            f"distillation.teacher_models.teacher_model.model_path={teacher}",
            "distillation.distillation_loss.loss_mode=forward_kl_topk",
            f"distillation.distillation_loss.topk={topk}",
        ],
        [],
    )
    load_plugins().hook.on_config_resolved(config=config)
    return config


def test_a_top_k_beyond_the_teachers_vocabulary_is_an_error(tiny_model_dir: Path, teacher_dir: Path) -> None:
    with pytest.raises(RLCoreError, match=r"distillation.distillation_loss.topk=100000 exceeds the vocabulary"):
        TeacherWorker(topk_config(tiny_model_dir, teacher_dir, 100_000), "teacher")


def test_the_teacher_returns_its_top_k(tiny_model_dir: Path, teacher_dir: Path, tiny_tokenizer) -> None:
    """``gather_ids`` and ``teacher_topk_log_probs`` ``[B, R, k]``: the teacher's k most likely tokens at each
    response position at temperature 1, not renormalised; 0 on padding."""
    batch = make_batch(tiny_tokenizer)
    batch.meta["temperature"] = 0.5  # the student's sampling temperature never reaches the teacher
    worker = TeacherWorker(topk_config(tiny_model_dir, teacher_dir, 6), "teacher")
    try:
        worker.init_model()
        out = worker.compute_teacher_log_prob(batch)
    finally:
        worker.shutdown()
    top, top_ids = torch.log_softmax(full_logits(teacher_dir, batch, temperature=1.0), dim=-1).topk(6, dim=-1)
    valid = batch["response_mask"].bool()
    assert tuple(out[GATHER_IDS].shape) == (*batch["responses"].shape, 6)
    assert torch.equal(out[GATHER_IDS][valid], top_ids[valid])
    torch.testing.assert_close(out[TEACHER_TOPK_LOG_PROBS][valid], top[valid], atol=1e-4, rtol=0)
    assert torch.all(out[TEACHER_TOPK_LOG_PROBS][~valid] == 0) and torch.all(out[GATHER_IDS][~valid] == 0)


def test_two_steps_with_the_top_k_loss(tmp_path: Path, tiny_model_dir: Path, teacher_dir: Path) -> None:
    """verl's Megatron example's settings (GKD, no task reward, floors and clamps) on the FSDP backend with
    packed sequences: the student moves toward the teacher and reports the top-k metrics."""
    task = make_tiny_task(tmp_path / "task", train_rows=8, test_rows=2)
    _, run_dir = tiny_run(
        tmp_path,
        tiny_model_dir,
        task,
        "algorithm.adv_estimator=grpo",
        "actor_rollout_ref.model.use_remove_padding=true",
        "reward_model.reward_manager=teacher_only",
        "distillation.enabled=true",
        f"distillation.teacher_models.teacher_model.model_path={teacher_dir}",
        "distillation.distillation_loss.loss_mode=forward_kl_topk",
        "distillation.distillation_loss.topk=8",
        "distillation.distillation_loss.use_task_rewards=false",
        "distillation.distillation_loss.use_policy_gradient=false",
        "distillation.distillation_loss.loss_max_clamp=10.0",
        "distillation.distillation_loss.log_prob_min_clamp=-10.0",
    )
    rows = [row for row in read_metrics(run_dir / "metrics.jsonl") if "training/global_step" in row]
    assert len(rows) == 2
    for row in rows:
        assert row["actor/distillation/loss"] > 0
        for name in ("student_mass", "teacher_mass"):
            assert 0 < row[f"actor/distillation/{name}"] <= 1 + 1e-5, name
            assert row[f"actor/distillation/{name}_min"] <= row[f"actor/distillation/{name}_max"]
        assert np.isfinite(row["actor/distillation/loss_max"])
        assert row["actor/grad_norm"] > 0
        assert "actor/distillation/abs_loss" not in row


def test_two_megatron_steps_with_tensor_parallelism(warm_ray: None, tmp_path: Path) -> None:
    """The script's backend and layout: the Megatron actor and teacher at tensor-parallel size 2 on two Ray
    worker processes, dynamic micro-batches, GKD-style forward_kl_topk without a task reward."""
    pytest.importorskip("ray")
    from rlcore_testkit.tiny import make_tiny_model_dir

    shape = {"hidden_size": 128, "num_heads": 4, "num_kv_heads": 2}  # two key/value groups: TP=2 splits them
    student = make_tiny_model_dir(tmp_path / "student", **shape)
    teacher = make_tiny_model_dir(tmp_path / "teacher", seed=1, **shape)
    task = make_tiny_task(tmp_path / "task", train_rows=8, test_rows=2)
    last, run_dir = tiny_run(
        tmp_path / "run",
        student,
        task,
        "actor_rollout_ref.actor.strategy=megatron",
        "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2",
        "actor_rollout_ref.ref.megatron.tensor_model_parallel_size=2",
        "actor_rollout_ref.actor.use_dynamic_bsz=true",
        "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=256",
        "trainer.executor=ray",
        "trainer.n_gpus_per_node=2",
        "algorithm.adv_estimator=grpo",
        "reward_model.reward_manager=teacher_only",
        "distillation.enabled=true",
        f"distillation.teacher_models.teacher_model.model_path={teacher}",
        "distillation.distillation_loss.loss_mode=forward_kl_topk",
        "distillation.distillation_loss.topk=16",
        "distillation.distillation_loss.use_task_rewards=false",
        "distillation.distillation_loss.loss_max_clamp=10.0",
        "distillation.distillation_loss.log_prob_min_clamp=-10.0",
    )
    rows = [row for row in read_metrics(run_dir / "metrics.jsonl") if "training/global_step" in row]
    assert [row["training/global_step"] for row in rows] == [1, 2]
    assert last["actor/distillation/loss"] > 0 and last["actor/grad_norm"] > 0
    assert 0 < last["actor/distillation/teacher_mass"] <= 1 + 1e-5


@pytest.mark.parametrize(
    ("overrides", "refused"),
    [
        (
            ["actor_rollout_ref.ref.ulysses_sequence_parallel_size=2"],
            "actor_rollout_ref.ref.ulysses_sequence_parallel_size",
        ),
        (["actor_rollout_ref.model.use_fused_kernels=true"], "actor_rollout_ref.model.use_fused_kernels"),
        (["actor_rollout_ref.model.use_fused_kernels=true", "actor_rollout_ref.actor.strategy=megatron"], None),
        (["actor_rollout_ref.actor.use_prefix_grouper=true"], "actor_rollout_ref.actor.use_prefix_grouper"),
    ],
)
def test_settings_without_whole_logits_are_refused(overrides: list[str], refused: str | None) -> None:
    """Ulysses slices (the actor's or the teachers' reference section) and fused kernels never hold a position's
    whole logits, and the shared-prompt forward returns the sampled tokens' only; the Megatron engine reads its
    output layer's logits whatever ``use_fused_kernels`` says."""
    from rlcore_plugin_distill.settings import distillation_settings

    from rlcore.config import ConfigError

    config = load_config(
        [],
        [
            "distillation.enabled=true",
            "distillation.teacher_models.teacher_model.model_path=/m",
            "distillation.distillation_loss.loss_mode=forward_kl_topk",
            *overrides,
        ],
        [],
    )
    if refused is None:
        assert distillation_settings(config).loss.uses_topk
    else:
        with pytest.raises(ConfigError, match=f"{refused}=.* cannot run with .*forward_kl_topk"):
            distillation_settings(config)


def test_a_teacher_padded_past_the_student_drops_its_padding_ids_from_the_top_k(
    tiny_model_dir: Path, padded_teacher_dir: Path, tiny_tokenizer
) -> None:
    """A teacher with 256 more ids than the student (the same tokenizer: padding): its top-k holds padding
    ids, which no token has and the student has no logit for; they come back as id 0 with log-prob ``-inf``,
    every other entry is the teacher's own top-k (the ids crashed the student's forward)."""
    batch = make_batch(tiny_tokenizer)
    worker = TeacherWorker(topk_config(tiny_model_dir, padded_teacher_dir, 6), "teacher")
    try:
        worker.init_model()
        out = worker.compute_teacher_log_prob(batch)
    finally:
        worker.shutdown()
    student_vocab = 448
    assert worker.student_vocab == student_vocab
    top, top_ids = torch.log_softmax(full_logits(padded_teacher_dir, batch, temperature=1.0), dim=-1).topk(6, dim=-1)
    valid = batch["response_mask"].bool()
    padding = (top_ids >= student_vocab) & valid[..., None]
    assert bool(padding.any()) and bool((~padding & valid[..., None]).any()), "the example needs both kinds"
    assert int(out[GATHER_IDS].max()) < student_vocab
    assert torch.all(out[GATHER_IDS][padding] == 0) and torch.all(out[TEACHER_TOPK_LOG_PROBS][padding] == -math.inf)
    kept = ~padding & valid[..., None]
    assert torch.equal(out[GATHER_IDS][kept], top_ids[kept])
    torch.testing.assert_close(out[TEACHER_TOPK_LOG_PROBS][kept], top[kept], atol=1e-4, rtol=0)
    assert torch.all(out[TEACHER_TOPK_LOG_PROBS][~valid] == 0)


def test_two_steps_with_the_top_k_loss_and_a_teacher_padded_past_the_student(
    tmp_path: Path, tiny_model_dir: Path, padded_teacher_dir: Path
) -> None:
    """The padded teacher's top-k trains the student (it stopped the run at the student's forward: "batch key
    'gather_ids' holds ids outside the model's vocabulary")."""
    task = make_tiny_task(tmp_path / "task", train_rows=8, test_rows=2)
    _, run_dir = tiny_run(
        tmp_path,
        tiny_model_dir,
        task,
        "algorithm.adv_estimator=grpo",
        "reward_model.reward_manager=teacher_only",
        "distillation.enabled=true",
        f"distillation.teacher_models.teacher_model.model_path={padded_teacher_dir}",
        "distillation.distillation_loss.loss_mode=forward_kl_topk",
        "distillation.distillation_loss.topk=8",
        "distillation.distillation_loss.use_task_rewards=false",
    )
    rows = [row for row in read_metrics(run_dir / "metrics.jsonl") if "training/global_step" in row]
    assert len(rows) == 2
    for row in rows:
        assert np.isfinite(row["actor/distillation/loss"]) and row["actor/distillation/loss"] > 0
        assert 0 < row["actor/distillation/teacher_mass"] < 1
        assert np.isfinite(row["actor/grad_norm"]) and row["actor/grad_norm"] > 0
