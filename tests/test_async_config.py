"""``trainer.v1`` and verl's fully-async keys: what each asks for (:func:`rlcore.config.async_training.async_plan`)
and the one-line errors for what rlcore cannot honour, before any worker starts."""

from __future__ import annotations

import pytest

from rlcore.config import ConfigError, check_values, load_config
from rlcore.config.async_training import UNCORRECTED_NOTE, async_plan, plan_line

LOG_PROBS = "actor_rollout_ref.rollout.calculate_log_probs=true"
SPLIT = ("trainer.placement=split", "trainer.executor=ray", "trainer.rollout_n_gpus_per_node=1")


def test_sync_is_the_default_and_has_no_plan() -> None:
    config = load_config([], [], [])
    assert async_plan(config) is None and plan_line(config) is None


def test_colocate_async_issues_a_fraction_of_a_batch_ahead() -> None:
    config = load_config(
        [],
        [
            "trainer.v1.trainer_mode=colocate_async",
            "trainer.v1.colocate_async.num_warmup_batches=0.25",
            "trainer.v1.sampler.max_off_policy_threshold=null",
            "data.train_batch_size=8",
            "actor_rollout_ref.actor.ppo_mini_batch_size=2",
            LOG_PROBS,
        ],
        [],
    )
    check_values(config)
    plan = async_plan(config)
    assert plan is not None and (plan.mode, plan.lane, plan.ahead, plan.threshold) == ("colocate_async", False, 2, None)
    assert "2 prompt group(s) issued ahead" in (plan_line(config) or "")
    assert plan.chunk == 0 and "partial-rollout" not in (plan_line(config) or "")


@pytest.mark.parametrize(
    ("correction", "noted"),
    [
        ([], True),
        (["algorithm.rollout_correction.rollout_is=token"], False),
        (["algorithm.rollout_correction.rollout_rs=token_k1"], False),
        (["algorithm.rollout_correction.bypass_mode=true"], False),
    ],
)
def test_the_plan_notes_an_async_run_without_off_policy_correction(correction: list[str], noted: bool) -> None:
    """Stale groups with nothing to correct for the behaviour policy's lag are named in the plan, not trained
    silently."""
    config = load_config([], ["trainer.v1.trainer_mode=colocate_async", LOG_PROBS, *correction], [])
    assert (UNCORRECTED_NOTE in (plan_line(config) or "")) == noted


@pytest.mark.parametrize(("value", "chunk"), [("null", 0), ("0", 0), ("16", 16)])
def test_partial_rollout_tokens_set_the_chunk(value: str, chunk: int) -> None:
    config = load_config(
        [], ["trainer.v1.trainer_mode=colocate_async", f"trainer.v1.partial_rollout_tokens={value}", LOG_PROBS], []
    )
    check_values(config)
    plan = async_plan(config)
    assert plan is not None and plan.chunk == chunk
    assert ("in partial-rollout chunks of 16 tokens" in (plan_line(config) or "")) == (chunk == 16)


@pytest.mark.parametrize(("chunk", "rounds"), [("null", 0), ("8", 3)])
def test_separate_async_partial_rollout_runs_rounds_ahead(chunk: str, rounds: int) -> None:
    """With a lane and partial rollout the plan runs ``rounds_ahead`` rounds while the trainer trains, and the dry
    run says so; without partial rollout the key has nothing to count."""
    config = load_config(
        [],
        [
            "trainer.v1.trainer_mode=separate_async",
            LOG_PROBS,
            *SPLIT,
            "trainer.v1.separate_async.parameter_sync_step=4",
            f"trainer.v1.partial_rollout_tokens={chunk}",
            "trainer.v1.separate_async.rounds_ahead=3",
        ],
        [],
    )
    check_values(config)
    plan = async_plan(config)
    assert plan is not None and plan.lane and plan.rounds_ahead == rounds
    line = plan_line(config) or ""
    assert ("chunks of 8 tokens (the lane runs 3 round(s) ahead while the trainer trains" in line) == bool(rounds)


def test_one_step_off_is_separate_async_k_batches_ahead() -> None:
    config = load_config([], ["async_training.enable=true", "async_training.max_staleness_steps=2"], [])
    plan = async_plan(config)
    assert plan is not None and (plan.mode, plan.lane, plan.threshold) == ("separate_async", True, 3)
    assert plan.ahead == 2 * int(config.data.train_batch_size)


def test_verls_staleness_threshold_is_separate_asyncs_warmup() -> None:
    config = load_config(
        [],
        ["trainer.v1.trainer_mode=separate_async", "async_training.staleness_threshold=0.5", LOG_PROBS, *SPLIT],
        [],
    )
    check_values(config)
    plan = async_plan(config)
    assert plan is not None and plan.ahead == int(config.data.train_batch_size) // 2
    assert "async_training.staleness_threshold=0.5" in plan.source


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["trainer.v1.sampler.max_off_policy_threshold=0"],
            r"max_off_policy_threshold must be a positive integer or null, got 0: .* 1 trains every group under",
        ),
        (["trainer.v1.sampler.max_off_policy_strategy=skip"], r"max_off_policy_strategy must be one of drop, wait"),
        (["trainer.v1.colocate_async.num_warmup_batches=-1"], r"num_warmup_batches must be a number of batches >= 0"),
        (
            ["trainer.v1.trainer_mode=colocate_async"],
            r"trainer_mode=colocate_async .* set actor_rollout_ref.rollout.calculate_log_probs=true",
        ),
        (
            ["trainer.v1.trainer_mode=separate_async", LOG_PROBS],
            r"separate_async .* needs trainer.placement=split and trainer.executor=ray \(got 'colocated'",
        ),
        (
            [
                "trainer.v1.trainer_mode=separate_async",
                LOG_PROBS,
                *SPLIT,
                "trainer.v1.separate_async.parameter_sync_step=2",
            ],
            r"parameter_sync_step=2: verl's separate_async needs data.train_batch_size = .* \(1024 != 2 × 256\); .* "
            r"set it to 4",
        ),
        (
            ["trainer.v1.trainer_mode=colocate_async", LOG_PROBS, "async_training.enable=true", *SPLIT],
            r"async_training.enable=true is one-step-off training \(separate_async\); leave trainer.v1.trainer_mode=sync",
        ),
        (
            ["trainer.v1.trainer_mode=colocate_async", LOG_PROBS, "skip.rollout.enable=true"],
            r"skip.rollout.enable=true with trainer.v1.trainer_mode=colocate_async: prompt groups are issued ahead",
        ),
        (["trainer.v1.partial_rollout_tokens=-1"], r"trainer.v1.partial_rollout_tokens must be an integer >= 0"),
        (
            ["async_training.enable=true", "trainer.v1.partial_rollout_tokens=4"],
            r"partial_rollout_tokens=4: only trainer.v1.trainer_mode=colocate_async or separate_async generates in "
            r"chunks \(got 'sync'; one-step-off training, async_training.enable, has no partial rollout\)",
        ),
        (
            [
                "trainer.v1.trainer_mode=separate_async",
                LOG_PROBS,
                *SPLIT,
                "trainer.v1.partial_rollout_tokens=4",
                "actor_rollout_ref.rollout.multi_turn.enable=true",
            ],
            r"partial_rollout_tokens=4: multi-turn agent loops .* have no partial rollout",
        ),
        (
            ["trainer.v1.separate_async.rounds_ahead=-1"],
            r"trainer.v1.separate_async.rounds_ahead must be an integer >= 0, got -1",
        ),
        (
            [
                "trainer.v1.trainer_mode=colocate_async",
                LOG_PROBS,
                "trainer.v1.partial_rollout_tokens=4",
                "actor_rollout_ref.rollout.multi_turn.enable=true",
            ],
            r"partial_rollout_tokens=4: multi-turn agent loops .* have no partial rollout",
        ),
        (
            ["async_training.trigger_parameter_sync_step=4", "trainer.v1.trainer_mode=colocate_async"],
            r"async_training.trigger_parameter_sync_step is verl's fully-async .* set trainer.v1.trainer_mode=separate",
        ),
    ],
)
def test_bad_settings_name_the_keys(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        check_values(load_config([], overrides, []))


@pytest.mark.parametrize(
    ("override", "feature"),
    [
        ("trainer.v1.separate_async.hybrid_rollout.enable_switch=true", "verl's V1 hybrid rollout switch"),
        ("trainer.v1.sampler.custom_sampler.path=my.py", "verl's V1 custom samplers"),
        ("trainer.v1.sampler.sync_refill_failed_groups=true", "sync trainer's failed-group refill"),
        ("async_training.use_trainer_do_validate=true", "these options of verl's fully-async trainer"),
    ],
)
def test_what_stays_missing_is_refused_by_name(override: str, feature: str) -> None:
    with pytest.raises(ConfigError, match=feature):
        load_config([], [override], [])


def test_the_off_values_of_what_is_missing_are_accepted() -> None:
    load_config(
        [],
        [
            "trainer.v1.separate_async.hybrid_rollout.enable_switch=false",
            "trainer.v1.sampler.sync_refill_failed_groups=false",
            "async_training.partial_rollout=false",
        ],
        [],
    )
