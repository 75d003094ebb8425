"""Reward data is guarded: a scorer's extra value named like a batch key is an error naming the key, inline
scoring gives each call its own copy of its inputs (as scorer processes do), and ground truths that are not
text are made text for the scorers that compare text, or counted when their meaning is unclear."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
from rlcore_testkit.contracts.rewards import make_reward_batch
from rlcore_testkit.runs import make_tiny_task, tiny_run

from rlcore.config.sections.reward_model import RewardModelConfig
from rlcore.registry import Registry
from rlcore.reward import RewardError
from rlcore.reward.extras import check_reward_extras
from rlcore.reward.ground_truth import ground_truth_text
from rlcore.reward.managers import NaiveRewardManager
from rlcore.reward.scoring import RegistryScorer


def with_extra(key: str):
    def scorer(data_source, solution_str, ground_truth, extra_info=None):
        return {"score": 1.0, key: "same"}

    return scorer


@pytest.mark.parametrize(("key", "where"), [("uid", "a key of the batch"), ("values", "a key the step adds")])
def test_an_extra_named_like_a_batch_key_is_an_error_naming_it(tiny_tokenizer, key: str, where: str) -> None:
    batch, _ = make_reward_batch(tiny_tokenizer, data_source="my/source")
    batch["uid"] = np.array(["a", "a", "b", "b"], dtype=object)
    result = NaiveRewardManager(tiny_tokenizer, with_extra(key), RewardModelConfig(scorer_timeout=0))(batch)
    with pytest.raises(RewardError) as caught:
        check_reward_extras(result.extra_info, batch, "custom_reward_function 'compute_score' in reward.py")
    message = str(caught.value)
    assert message.startswith(
        "custom_reward_function 'compute_score' in reward.py (data_source 'my/source', sample 0) returned the "
        f"extra value {key!r}, which is {where}"
    )
    assert f"it would replace the batch's {key!r} for the rest of the step; rename it" in message
    check_reward_extras({"acc": [1.0] * 4}, batch)  # a new name is fine


UID_REWARD = """
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    return {"score": float(len(solution_str) % 3), "uid": "one group"}
"""


def test_a_run_whose_scorer_returns_uid_stops_instead_of_regrouping(tmp_path: Path, tiny_model_dir: Path) -> None:
    task = make_tiny_task(tmp_path / "task")
    task["reward"].write_text(UID_REWARD)
    with pytest.raises(RewardError, match=r"returned the extra value 'uid', which is a key of the batch"):
        tiny_run(tmp_path, tiny_model_dir, task, "trainer.test_freq=-1", "trainer.val_before_train=false")


def counts_visits(data_source, solution_str, ground_truth, extra_info=None):
    """Scores how many times this ``extra_info`` dict was seen, and marks it."""
    extra_info["visits"] = extra_info.get("visits", 0) + 1
    return float(extra_info["visits"])


def test_inline_scoring_gives_each_call_its_own_copy_like_scorer_processes(tiny_tokenizer) -> None:
    batch, _ = make_reward_batch(tiny_tokenizer)
    shared = {"value": 1.0}  # what repeat(n, interleave=True) gives a prompt's samples: one dict
    batch["extra_info"] = np.array([shared] * 4 + [None], dtype=object)[:-1]
    scores = {}
    for timeout in (0, 10):
        manager = NaiveRewardManager(tiny_tokenizer, counts_visits, RewardModelConfig(scorer_timeout=timeout))
        scores[timeout] = manager(batch).token_level_scores.sum(-1).tolist()
        manager.close()
    assert scores[0] == scores[10] == [1.0] * 4
    assert shared == {"value": 1.0}, "the batch's own extra_info is untouched"


# ------------------------------------------------------------------ ground truths


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ("33", "33"),
        (33, "33"),
        (33.0, "33"),
        (np.int64(33), "33"),
        (np.float32(33.0), "33"),
        (0.5, "0.5"),
        (np.array(33.0), "33"),
        (["33"], "33"),
        ((33.0,), "33"),
        (np.array([33]), "33"),
        (None, None),
        (float("nan"), None),
        (float("inf"), None),
        (True, None),
        (["33", "34"], None),
        ([], None),
        ({"answer": "33"}, None),
        ([["33"]], None),
    ],
)
def test_ground_truth_text(value, text) -> None:
    assert ground_truth_text(value) == text


def test_text_scorers_get_text_ground_truths_and_unclear_ones_are_counted_once(
    tiny_tokenizer, caplog, plugin_manager
) -> None:
    truths = [72.0, np.int64(72), ["72"], None, float("nan"), ["72", "73"]]
    batch, _ = make_reward_batch(tiny_tokenizer, ["#### 72"] * 6, data_source="openai/gsm8k", ground_truths=truths)
    manager = NaiveRewardManager(
        tiny_tokenizer, RegistryScorer(plugin_manager.registry), RewardModelConfig(scorer_timeout=0)
    )
    with caplog.at_level(logging.WARNING, logger="rlcore.reward.managers"):
        result = manager(batch)
        again = manager(batch)
    assert result.token_level_scores.sum(-1).tolist() == [1.0, 1.0, 1.0, 0.0, 0.0, 0.0]
    assert result.metrics["reward/ground_truth_nonstring"] == 3 == again.metrics["reward/ground_truth_nonstring"]
    warnings = [r.getMessage() for r in caplog.records if "no clear text form" in r.getMessage()]
    assert len(warnings) == 1, "once per data source"
    assert "data_source 'openai/gsm8k': the ground truth of sample 3 is None" in warnings[0]
    assert "3 in this batch" in warnings[0] and "reward/ground_truth_nonstring" in warnings[0]


def keeps_type(data_source, solution_str, ground_truth, extra_info=None):
    """A custom function comparing numbers (verl passes the ground truth as the data holds it)."""
    return float(isinstance(ground_truth, float) and ground_truth == 72.0)


def test_a_custom_reward_function_gets_the_ground_truth_as_stored(tiny_tokenizer) -> None:
    batch, _ = make_reward_batch(tiny_tokenizer, ["72"], data_source="openai/gsm8k", ground_truths=[72.0])
    result = NaiveRewardManager(tiny_tokenizer, keeps_type, RewardModelConfig(scorer_timeout=0))(batch)
    assert result.token_level_scores.sum().item() == 1.0
    assert "reward/ground_truth_nonstring" not in result.metrics


@pytest.mark.parametrize(
    ("data_source", "response"),
    [("rlcore/arith", "33"), ("rlcore/arith_chain", "20+13=33"), ("rlcore/arith_tools", "so 33")],
)
def test_the_bundled_task_scorers_get_text_ground_truths_and_unclear_ones_are_counted(
    tiny_tokenizer, data_source: str, response: str, plugin_manager
) -> None:
    """The bundled tasks' scorers compare text, as GSM8K's does: a float column's ``33.0`` scores a correct
    ``33`` 1 (it scored 0, silently), and a ground truth without a clear text form is counted."""
    truths = [33.0, np.int64(33), ["33"], np.float32(33.0), None]
    batch, _ = make_reward_batch(tiny_tokenizer, [response] * 5, data_source=data_source, ground_truths=truths)
    result = NaiveRewardManager(
        tiny_tokenizer, RegistryScorer(plugin_manager.registry), RewardModelConfig(scorer_timeout=0)
    )(batch)
    assert result.token_level_scores.sum(-1).tolist() == [1.0, 1.0, 1.0, 1.0, 0.0]
    assert result.metrics["reward/ground_truth_nonstring"] == 1


def test_the_bundled_task_scorers_read_a_float_ground_truth_as_its_integer() -> None:
    from rlcore_plugin_tasks import arith, arith_chain, arith_tools, shapes_vl

    assert arith.score("rlcore/arith", "33", 33.0) == 1.0
    assert arith_chain.score("rlcore/arith_chain", "20+13=33", np.float64(33.0)) == 1.0
    assert arith_tools.score("rlcore/arith_tools", "so 33", [33.0]) == 1.0
    assert shapes_vl.score("rlcore/shapes_vl", "red square", np.array("red")) == 1.0


# ------------------------------------------------------------------ torch's global switches
def changes_torch(data_source, solution_str, ground_truth, extra_info=None):
    """Turns torch's global switches, as a scorer running a small model of its own might."""
    import torch

    torch.set_grad_enabled(False)
    torch.set_default_dtype(torch.float64)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    torch.autograd.set_detect_anomaly(True)
    return float(torch.ones(1).sum())


def test_an_inline_scorer_cannot_change_torchs_global_switches(tiny_tokenizer, caplog) -> None:
    """Before: gradients stayed off, and the next backward pass failed with "element 0 of tensors does not require
    grad", naming no scorer; the other switches silently changed the training."""
    import torch

    threads = torch.get_num_threads()
    batch, _ = make_reward_batch(tiny_tokenizer)
    manager = NaiveRewardManager(tiny_tokenizer, changes_torch, RewardModelConfig(scorer_timeout=0))
    with caplog.at_level(logging.WARNING, logger="rlcore.reward.torch_state"):
        result = manager(batch)
        manager(batch)
    assert result.token_level_scores.sum().item() == 4.0
    assert torch.is_grad_enabled() and torch.get_default_dtype() == torch.float32
    assert torch.get_num_threads() == threads and not torch.are_deterministic_algorithms_enabled()
    assert not torch.is_anomaly_enabled()
    weight = torch.ones(2, requires_grad=True)
    (weight * 3).sum().backward()
    assert weight.grad is not None and weight.grad.tolist() == [3.0, 3.0]
    warnings = [record.getMessage() for record in caplog.records]
    label = "the reward scorer (data_source 'contract')"
    assert warnings[0] == (
        f"{label} changed torch's grad mode (torch.set_grad_enabled) from True to False; rlcore set it back after the "
        "call (a scorer's torch settings stay in its call, as they stay in a scorer process)"
    )
    changed = [w.split(" changed torch's ")[1].split(" (torch.")[0] for w in warnings]
    expected = ["grad mode", "default dtype", "deterministic algorithms", "anomaly detection"]
    if threads != 1:
        expected.insert(2, "intra-op threads")
    assert changed == expected, "each once, though the scorer ran 8 times"
    assert all(w.startswith(label) for w in warnings)


def test_a_reward_file_changing_torch_at_import_is_set_back(tmp_path: Path) -> None:
    import torch

    from rlcore.config.schema import CustomRewardFunctionConfig
    from rlcore.reward.scoring import build_scorer

    reward = tmp_path / "grad_off_reward.py"
    reward.write_text("import torch\n\ntorch.set_grad_enabled(False)\n\ndef compute_score(**kwargs):\n    return 1.0\n")
    build_scorer(CustomRewardFunctionConfig(path=str(reward), name="compute_score"), Registry())
    assert torch.is_grad_enabled()


GRAD_OFF_REWARD = """
import torch

def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    torch.set_grad_enabled(False)
    return 0.5
"""


def test_a_run_whose_inline_scorer_turns_gradients_off_trains(tmp_path: Path, tiny_model_dir: Path) -> None:
    """Before: the run failed at the first backward pass with a bare autograd error."""
    task = make_tiny_task(tmp_path / "task")
    task["reward"].write_text(GRAD_OFF_REWARD)
    last, run_dir = tiny_run(tmp_path, tiny_model_dir, task, "reward_model.scorer_timeout=0", "trainer.test_freq=-1")
    assert last["training/global_step"] == 2 and "actor/pg_loss" in last
