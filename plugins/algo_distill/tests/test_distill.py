"""On-policy distillation: the teacher's log-probs and the loss against independent computations, real 2-step
runs with a tiny teacher and student (with and without a verifier, GRPO sampling), and the bad inputs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from rlcore_plugin_distill.loss import TEACHER_LOG_PROBS, distillation_loss, make_distillation_term
from rlcore_plugin_distill.settings import LossSettings
from rlcore_plugin_distill.worker import TeacherWorker
from rlcore_testkit.runs import dry_run, make_tiny_task, tiny_run

from rlcore.api.batch import Batch
from rlcore.config import load_config
from rlcore.errors import RLCoreError
from rlcore.tracking.sinks import read_metrics

PG = LossSettings("k1", False, 1.0, None, True, 0.2, 0.2, 0.2)
GKD = LossSettings("k3", False, 1.0, None, False, 0.2, 0.2, 0.2)


@pytest.fixture(scope="session", name="foreign_dir")
def foreign_dir_fixture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny model whose tokenizer is trained on another corpus (another vocabulary)."""
    from rlcore_testkit.tiny import make_tiny_model_dir

    path = tmp_path_factory.mktemp("foreign") / "model"
    make_tiny_model_dir(path, corpus=[f"zebra {i} quokka {i * 7} xylophone" for i in range(300)])
    return path


def scored_batch(tokenizer) -> Batch:
    """Four prompts with a fixed response each, as a rollout lays them out (left-padded prompts, right-padded
    responses), with two data sources."""
    prompts = [tokenizer(text)["input_ids"] for text in ("3+5=", "12+7=", "the quick", "9")]
    answers = [tokenizer(text)["input_ids"] for text in ("8", "19 is it", "brown fox", "99")]
    plen, width, pad = max(map(len, prompts)), max(map(len, answers)), tokenizer.pad_token_id
    prompt_ids = torch.tensor([[pad] * (plen - len(p)) + p for p in prompts])
    prompt_mask = torch.tensor([[0] * (plen - len(p)) + [1] * len(p) for p in prompts])
    responses = torch.tensor([r + [pad] * (width - len(r)) for r in answers])
    mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in answers])
    attention = torch.cat([prompt_mask, mask], dim=1)
    return Batch.from_dict(
        {
            "input_ids": torch.cat([prompt_ids, responses], dim=1),
            "attention_mask": attention,
            "position_ids": (attention.cumsum(-1) - 1).clamp(min=0),
            "responses": responses,
            "response_mask": mask,
            "data_source": np.array(["math", "math", "text", "math"], dtype=object),
        }
    )


def independent_log_probs(model_dir: Path, batch: Batch) -> torch.Tensor:
    """``[B, R]`` log-probs of the response tokens by a plain transformers forward, one row at a time, without
    padding: log softmax of the logits before each response token, read at that token."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    width = batch["responses"].shape[1]
    out = torch.zeros(batch["responses"].shape)
    for i in range(len(batch)):
        ids = batch["input_ids"][i][batch["attention_mask"][i].bool()]
        length = int(batch["response_mask"][i].sum())
        with torch.no_grad():
            logits = model(ids.unsqueeze(0)).logits[0].float()
        prompt = len(ids) - length
        logp = torch.log_softmax(logits[prompt - 1 : len(ids) - 1], dim=-1)
        out[i, :length] = logp.gather(-1, ids[prompt:].unsqueeze(-1)).squeeze(-1)
        assert out.shape[1] == width
    return out


def teacher_overrides(*teachers: tuple[str, Path, str | None]) -> list[str]:
    """``distillation.*`` overrides for ``(entry, model_dir, key)`` teachers."""
    out = ["distillation.enabled=true"]
    for name, path, key in teachers:
        plus = "" if name == "teacher_model" else "+"
        out.append(f"{plus}distillation.teacher_models.{name}.model_path={path}")
        if key is not None:
            out.append(f"{plus}distillation.teacher_models.{name}.key={key}")
    return out


def config_for(student: Path, *overrides: str):
    """A CPU config of ``student`` with ``overrides`` (the plugin's on_config_resolved check included)."""
    from rlcore.plugins import load_plugins

    config = load_config([], [f"actor_rollout_ref.model.path={student}", "trainer.device=cpu", *overrides], [])
    load_plugins().hook.on_config_resolved(config=config)
    return config


def teacher_log_probs(config, batch: Batch) -> torch.Tensor:
    """The teacher worker's ``teacher_log_probs`` for ``batch``."""
    worker = TeacherWorker(config, "teacher")
    try:
        worker.init_model()
        return worker.compute_teacher_log_prob(batch)[TEACHER_LOG_PROBS]
    finally:
        worker.shutdown()


def test_teacher_log_probs_match_an_independent_forward(
    tiny_model_dir: Path, teacher_dir: Path, tiny_tokenizer
) -> None:
    batch = scored_batch(tiny_tokenizer)
    config = config_for(tiny_model_dir, *teacher_overrides(("teacher_model", teacher_dir, None)))
    # the student's rollout temperature must not reach the teacher (it scores at temperature 1, as in verl)
    batch.meta["temperature"] = 0.5
    got = teacher_log_probs(config, batch)
    expected = independent_log_probs(teacher_dir, batch)
    assert torch.allclose(got, expected, atol=1e-4), (got - expected).abs().max()
    assert torch.all(got[batch["response_mask"] == 0] == 0)
    student = independent_log_probs(tiny_model_dir, batch)
    assert (got - student)[batch["response_mask"].bool()].abs().min() > 0, "teacher and student must differ"


def test_two_teachers_are_routed_by_the_teacher_key(tiny_model_dir: Path, teacher_dir: Path, tiny_tokenizer) -> None:
    batch = scored_batch(tiny_tokenizer)
    config = config_for(
        tiny_model_dir, *teacher_overrides(("math", teacher_dir, "math"), ("text", tiny_model_dir, "text"))
    )
    got = teacher_log_probs(config, batch)
    math_rows = torch.tensor([0, 1, 3])
    assert torch.allclose(got[math_rows], independent_log_probs(teacher_dir, batch)[math_rows], atol=1e-4)
    assert torch.allclose(got[2], independent_log_probs(tiny_model_dir, batch)[2], atol=1e-4)
    batch["data_source"] = np.array(["math", "math", "code", "math"], dtype=object)
    with pytest.raises(RLCoreError, match="no teacher has the key 'code'"):
        teacher_log_probs(config, batch)


def test_the_reward_is_the_per_token_reverse_kl() -> None:
    """PG mode: the surrogate's advantage is r_t = log π_T − log π_S; at ratio 1 the loss is −mean(r_t) and its
    gradient −mean(r_t ∇log π_S). GKD mode: the k3 estimate exp(Δ) − Δ − 1 with Δ = log π_T − log π_S, backpropagated."""
    torch.manual_seed(0)
    student = torch.randn(3, 5) - 2.0
    teacher = torch.randn(3, 5) - 2.0
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]])
    micro = Batch.from_dict({"response_mask": mask, "old_log_probs": student.clone(), TEACHER_LOG_PROBS: teacher})
    reward = (teacher - student)[mask.bool()]

    log_prob = student.clone().requires_grad_(True)
    loss, metrics = distillation_loss(log_prob, micro, PG, "token-mean", None)
    assert loss.item() == pytest.approx(-reward.mean().item(), abs=1e-6)
    loss.backward()
    expected_grad = torch.zeros_like(student)
    expected_grad[mask.bool()] = -reward / mask.sum()
    assert torch.allclose(log_prob.grad, expected_grad, atol=1e-6)
    k1 = -reward
    assert metrics["actor/distillation/loss_min"] == pytest.approx(k1.min().item(), abs=1e-6)
    assert metrics["actor/distillation/loss_max"] == pytest.approx(k1.max().item(), abs=1e-6)
    assert metrics["actor/distillation/abs_loss"] == pytest.approx(k1.abs().mean().item(), abs=1e-6)
    assert metrics["actor/distillation/pg_clipfrac"] == 0.0

    log_prob = student.clone().requires_grad_(True)
    loss, _ = distillation_loss(log_prob, micro, GKD, "token-mean", None)
    k3 = torch.exp(teacher - student) - (teacher - student) - 1
    assert loss.item() == pytest.approx(k3[mask.bool()].mean().item(), rel=1e-5)
    loss.backward()
    expected_grad = torch.zeros_like(student)
    expected_grad[mask.bool()] = (1 - torch.exp(teacher - student))[mask.bool()] / mask.sum()
    assert torch.allclose(log_prob.grad, expected_grad, atol=1e-5)


def test_the_term_adds_to_or_replaces_the_task_loss(tiny_model_dir: Path, teacher_dir: Path) -> None:
    student, teacher = torch.tensor([[-1.0, -2.0]]), torch.tensor([[-0.5, -3.0]])
    micro = Batch.from_dict(
        {"response_mask": torch.ones(1, 2), "old_log_probs": student.clone(), TEACHER_LOG_PROBS: teacher}
    )
    base = teacher_overrides(("teacher_model", teacher_dir, None))
    pg = ["distillation.distillation_loss.loss_mode=k1", "distillation.distillation_loss.use_policy_gradient=true"]
    task = torch.tensor(10.0)
    alone = make_distillation_term(
        config_for(tiny_model_dir, *base, *pg, "distillation.distillation_loss.use_task_rewards=false")
    )
    # -mean(r) with r = [0.5, -1.0]: the task loss is dropped
    assert alone(student, micro, task)[0].item() == pytest.approx(0.25)
    both = make_distillation_term(
        config_for(tiny_model_dir, *base, *pg, "distillation.distillation_loss.distillation_loss_coef=2")
    )
    assert both(student, micro, task)[0].item() == pytest.approx(10.0 + 2 * 0.25)
    clamped = make_distillation_term(
        config_for(tiny_model_dir, *base, "distillation.distillation_loss.loss_max_clamp=0.1")
    )
    k3 = torch.exp(teacher - student) - (teacher - student) - 1  # 0.149 and 0.368: both clamped to 0.1
    assert k3.min() > 0.1
    assert clamped(student, micro, task)[0].item() == pytest.approx(10.0 + 0.1)


def run_rows(run_dir: Path) -> list[dict]:
    """The training steps' metric rows of a run."""
    return [row for row in read_metrics(run_dir / "metrics.jsonl") if "training/global_step" in row]


def test_two_steps_without_a_verifier(tmp_path: Path, tiny_model_dir: Path, teacher_dir: Path) -> None:
    """GRPO sampling (n=4), the teacher as the only signal (PG OPD, verl's example settings)."""
    task = make_tiny_task(tmp_path / "task", train_rows=8, test_rows=2)
    _, run_dir = tiny_run(
        tmp_path,
        tiny_model_dir,
        task,
        "algorithm.adv_estimator=grpo",
        "reward_model.reward_manager=teacher_only",
        *teacher_overrides(("teacher_model", teacher_dir, None)),
        "distillation.distillation_loss.loss_mode=k1",
        "distillation.distillation_loss.use_policy_gradient=true",
        "distillation.distillation_loss.use_task_rewards=false",
    )
    rows = run_rows(run_dir)
    assert len(rows) == 2
    for row in rows:
        for name in ("loss", "abs_loss", "loss_min", "loss_max", "pg_clipfrac", "ppo_kl"):
            assert np.isfinite(row[f"actor/distillation/{name}"]), name
        assert row["actor/distillation/abs_loss"] > 0
        assert row["actor/distillation/loss_min"] <= row["actor/distillation/loss_max"]
        assert row["critic/score/mean"] == 0.0  # no verifier
        assert row["actor/grad_norm"] > 0  # the teacher alone moves the student
        assert row["timing_s/teacher"] > 0


def test_two_steps_with_a_verifier(tmp_path: Path, tiny_model_dir: Path, teacher_dir: Path) -> None:
    """The task reward's GRPO loss plus the k3 distillation loss backpropagated (GKD-style)."""
    task = make_tiny_task(tmp_path / "task", train_rows=8, test_rows=2)
    last, run_dir = tiny_run(
        tmp_path,
        tiny_model_dir,
        task,
        "algorithm.adv_estimator=grpo",
        *teacher_overrides(("teacher_model", teacher_dir, None)),
        "distillation.distillation_loss.distillation_loss_coef=0.5",
    )
    rows = run_rows(run_dir)
    assert len(rows) == 2
    for row in rows:
        assert np.isfinite(row["actor/distillation/loss"]) and row["actor/distillation/loss"] > 0  # k3 ≥ 0
        assert np.isfinite(row["actor/pg_loss"])
        assert "actor/distillation/pg_clipfrac" not in row
    assert last["critic/score/mean"] > 0


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["distillation.enabled=true"], "distillation.teacher_models.teacher_model.model_path is not set"),
        (
            [
                "distillation.enabled=true",
                "distillation.teacher_models.teacher_model.model_path=/m",
                "+distillation.teacher_models.teacher_model.inference.swap_space=4",
            ],
            "unknown config key '+distillation.teacher_models.teacher_model.inference.swap_space': rlcore has no such "
            "key, and distillation.teacher_models.teacher_model.inference takes no added keys",
        ),
        (
            [
                "distillation.enabled=true",
                "distillation.teacher_models.teacher_model.model_path=/m",
                "distillation.distillation_loss.loss_mode=forward_kl_topk",
                "distillation.distillation_loss.log_prob_min_clamp=1",
            ],
            "distillation.distillation_loss.log_prob_min_clamp=1 must be negative",
        ),
        (
            [
                "distillation.enabled=true",
                "distillation.teacher_models.teacher_model.model_path=/m",
                "distillation.distillation_loss.loss_mode=forward_kl_topk",
                "actor_rollout_ref.model.use_fused_kernels=true",
            ],
            "actor_rollout_ref.model.use_fused_kernels=True cannot run with "
            "distillation.distillation_loss.loss_mode=forward_kl_topk",
        ),
        (
            [
                "distillation.enabled=true",
                "distillation.teacher_models.teacher_model.model_path=/m",
                "distillation.distillation_loss.loss_mode=k1",
            ],
            "the gradient of k1 does not depend on the teacher",
        ),
        (
            [
                "distillation.enabled=true",
                "distillation.teacher_models.teacher_model.model_path=/m",
                "distillation.distillation_loss.loss_mode=k4",
            ],
            "loss_mode='k4' is unknown",
        ),
        (
            [
                "distillation.enabled=true",
                "distillation.teacher_models.teacher_model.model_path=/m",
                "distillation.nnodes=1",
                "distillation.n_gpus_per_node=3",
            ],
            "a replica's size (tensor × data parallel = 2) must divide the teacher pool",
        ),
        (
            [
                "distillation.enabled=true",
                "+distillation.teacher_models.a.model_path=/m",
                "+distillation.teacher_models.a.num_replicas=1",
                "+distillation.teacher_models.a.key=x",
                "distillation.nnodes=1",
                "distillation.n_gpus_per_node=8",
            ],
            "the teachers' replicas need 2 devices",
        ),
        (
            [
                "distillation.enabled=true",
                "distillation.teacher_models.teacher_model.model_path=/m",
                "+distillation.teacher_models.b.model_path=/n",
            ],
            "distillation.teacher_models.teacher_model.model_path is set beside other teachers",
        ),
        (
            [
                "distillation.enabled=true",
                "+distillation.teacher_models.a.model_path=/m",
                "+distillation.teacher_models.b.model_path=/n",
                "+distillation.teacher_models.b.key=x",
            ],
            "distillation.teacher_models.a.key is not set",
        ),
        (
            [
                "distillation.enabled=true",
                "distillation.teacher_models.teacher_model.model_path=/m",
                "distillation.teacher_models.teacher_model.inference.max_model_len=64",
            ],
            "inference.max_model_len=64 cannot hold the student's prompt and response",
        ),
        (
            [
                "distillation.enabled=true",
                "distillation.teacher_models.teacher_model.model_path=/m",
                "distillation.teacher_models.teacher_model.inference.expert_parallel_size=4",
            ],
            "inference.expert_parallel_size=4 must be 1 or tensor_model_parallel_size × data_parallel_size = 2",
        ),
        (["reward_model.reward_manager=teacher_only"], "scores every response 0"),
        (["distillation.unknown=1"], "unknown config key 'distillation.unknown'"),
    ],
)
def test_bad_settings_fail_the_dry_run_naming_the_key(overrides: list[str], message: str, tiny_model_dir: Path) -> None:
    result = dry_run(
        "data.train_files=x.parquet", f"actor_rollout_ref.model.path={tiny_model_dir}", "trainer.device=cpu", *overrides
    )
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert message in result.output, result.output


def test_the_teachers_serving_settings_are_noted(tiny_model_dir: Path, teacher_dir: Path) -> None:
    """verl's vLLM settings of a teacher (expert parallelism over its replica's tp × dp ranks, as verl requires)
    pass the dry run with a note that they change nothing: the training backend's forward scores the teacher."""
    result = dry_run(
        f"actor_rollout_ref.model.path={tiny_model_dir}",
        "trainer.device=cpu",
        "distillation.enabled=true",
        f"distillation.teacher_models.teacher_model.model_path={teacher_dir}",
        "distillation.teacher_models.teacher_model.inference.tensor_model_parallel_size=4",
        "distillation.teacher_models.teacher_model.inference.expert_parallel_size=4",
    )
    assert result.exit_code == 0, result.output
    assert (
        "distillation.teacher_models.teacher_model.inference: name=vllm, expert_parallel_size=4, "
        "gpu_memory_utilization=0.5 change nothing here"
    ) in result.output


def test_a_teacher_directory_and_tokenizer_are_checked(
    tiny_model_dir: Path, teacher_dir: Path, foreign_dir: Path, tmp_path: Path
) -> None:
    missing = config_for(tiny_model_dir, *teacher_overrides(("teacher_model", tmp_path / "none", None)))
    with pytest.raises(RLCoreError, match=r"teacher_models.teacher_model.model_path=.*no config.json there"):
        TeacherWorker(missing, "teacher")
    foreign = config_for(
        tiny_model_dir, *teacher_overrides(("math", teacher_dir, "math"), ("text", foreign_dir, "text"))
    )
    with pytest.raises(
        RLCoreError, match=r"distillation.teacher_models.text.model_path=.*tokenizer differs from the student's"
    ):
        TeacherWorker(foreign, "teacher")


def test_a_teacher_with_fewer_ids_than_the_student_is_one_error_naming_both_sizes(
    tiny_model_dir: Path, short_teacher_dir: Path
) -> None:
    """The student (448 ids, padded) can sample ids the teacher (443, its tokenizer's) has no log-prob for."""
    config = config_for(tiny_model_dir, *teacher_overrides(("teacher_model", short_teacher_dir, None)))
    with pytest.raises(RLCoreError) as caught:
        TeacherWorker(config, "teacher")
    assert str(caught.value) == (
        f"distillation.teacher_models.teacher_model.model_path={short_teacher_dir}: the teacher's vocabulary "
        f"(vocab_size 443) and the student's (actor_rollout_ref.model.path={tiny_model_dir}, vocab_size 448) "
        "differ and the student can sample ids the teacher has no log-prob for; use a teacher whose vocabulary is "
        "at least the student's"
    )


def test_per_token_log_probs_of_a_teacher_padded_past_the_student(
    tiny_model_dir: Path, padded_teacher_dir: Path, tiny_tokenizer
) -> None:
    """A teacher padded past the student scores the sampled tokens as its plain forward does (the student
    samples no padding id; verl's vLLM teacher normalises over its padded vocabulary too)."""
    batch = scored_batch(tiny_tokenizer)
    config = config_for(tiny_model_dir, *teacher_overrides(("teacher_model", padded_teacher_dir, None)))
    got = teacher_log_probs(config, batch)
    torch.testing.assert_close(got, independent_log_probs(padded_teacher_dir, batch), atol=1e-4, rtol=0)


def test_registration_and_defaults() -> None:
    from rlcore.plugins import load_plugins, step_extensions

    manager = load_plugins()
    assert manager.registry.has("reward_manager", "teacher_only")
    config = load_config([], [], [])
    assert config.distillation.enabled is False and config.distillation.teacher_key == "data_source"
    assert config.distillation.distillation_loss.loss_mode == "k3"
    assert step_extensions(config) == []
    config.distillation.enabled = True
    (extension,) = step_extensions(config)
    assert extension.name == "teacher" and extension.method == "compute_teacher_log_prob"
