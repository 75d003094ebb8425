"""The reward-model worker: a frozen discriminative reward model on any training backend.

The score of a response is the reward model's logit at the last valid token of prompt + response (verl's
``AutoModelForTokenClassification`` reward model with one label), placed on the response's last valid
token as ``rm_scores``. When the reward model's tokenizer differs from the policy's
(``reward_model.model.input_tokenizer``), the response is decoded and the conversation (the batch's
``raw_prompt`` messages plus the response as the assistant turn) is re-rendered with the reward model's
chat template; ``reward_model.max_length`` then cuts such inputs from the left.
"""

from __future__ import annotations

from typing import Any

import torch

from rlcore.api.batch import Batch
from rlcore.api.training import TrainingEngine
from rlcore.config.batch_sizes import data_parallel_size, token_budget
from rlcore.config.keys import positive_int
from rlcore.errors import RLCoreError
from rlcore.rollout.padding import left_pad
from rlcore.workers.base import WorkerBase, cpu_batch
from rlcore.workers.micro_batches import plan_micro_batches

RM = "reward_model"


def _load_tokenizer(path: str, key: str, trust: bool) -> Any:
    """The tokenizer at ``path``; an unloadable one is an error naming ``key``."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(path, trust_remote_code=trust)
    except (OSError, ValueError) as exc:
        raise RLCoreError(f"{key}={path!r} has no loadable tokenizer: {exc}") from exc


def same_tokenizer(a: Any, b: Any) -> bool:
    """Whether two tokenizers map text to the same ids and render chats the same way."""
    return a.get_vocab() == b.get_vocab() and getattr(a, "chat_template", None) == getattr(b, "chat_template", None)


def last_token_scores(token_scores: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """``[B, R]`` zeros holding, at each row's last valid position ``valid − 1``, the score found there
    (position 0 for an empty response)."""
    out = torch.zeros_like(token_scores, dtype=torch.float32)
    if token_scores.shape[1]:
        rows = torch.arange(token_scores.shape[0])
        last = (valid.long() - 1).clamp(min=0)
        out[rows, last] = token_scores[rows, last].float()
    return out


class RewardModelWorker(WorkerBase):
    """The reward model (role ``reward_model``): the backend's ``reward`` engine of ``reward_model.model.path``."""

    ROLES = (RM,)
    MODEL_SECTIONS = ("reward_model.model",)

    def configure(self) -> None:
        """Validate the ``reward_model`` section: model path, micro-batch size, token budget, max length."""
        section = self.sections.reward_model
        if not section.model.path:
            raise RLCoreError(
                f"{RM}.enable=true needs {RM}.model.path: a token- or sequence-classification model with one label"
            )
        micro = section.micro_batch_size_per_gpu
        self.micro_batch_size = None if micro is None else positive_int(micro, f"{RM}.micro_batch_size_per_gpu")
        if micro is None and section.micro_batch_size is not None:  # verl's global size, per data-parallel rank
            dp_size = data_parallel_size(self.config, RM, self.world_size)
            self.micro_batch_size = max(1, positive_int(section.micro_batch_size, f"{RM}.micro_batch_size") // dp_size)
        self.budget = token_budget(section, "use_dynamic_bsz", "forward_max_token_len_per_gpu")
        max_length = section.max_length
        self.max_length = None if max_length is None else positive_int(max_length, f"{RM}.max_length")
        self._check_engine_config("reward_model", RM, f"{RM}.model")
        self.engine: TrainingEngine | None = None
        self.tokenizer: Any = None
        self.input_tokenizer: Any = None

    def init_model(self) -> None:
        """Build the reward-model engine and load both tokenizers (the reward model's and the policy's)."""
        model = self.sections.reward_model.model
        trust = bool(model.trust_remote_code)
        self.tokenizer = _load_tokenizer(str(model.path), f"{RM}.model.path", trust)  # configure() checked it is set
        source = str(model.input_tokenizer or self.sections.actor_rollout_ref.model.path)
        self.input_tokenizer = _load_tokenizer(source, f"{RM}.model.input_tokenizer", trust)
        self.rerender = not same_tokenizer(self.tokenizer, self.input_tokenizer)
        if self.rerender and not getattr(self.tokenizer, "chat_template", None):
            raise RLCoreError(
                f"{RM}.model.path={model.path!r}: its tokenizer differs from the policy's ({RM}.model.input_tokenizer="
                f"{source!r}) and has no chat template to re-render the responses with"
            )
        self.engine = self._create_engine("reward_model", RM, f"{RM}.model")

    def compute_rm_score(self, batch: Batch) -> Batch:
        """``rm_scores`` ``[B, R]``: each response's reward-model score on its last valid token."""
        if self.engine is None:
            raise RLCoreError("compute_rm_score() called before init_model()")
        width = batch["responses"].shape[1]
        valid = batch["attention_mask"][:, -width:].sum(-1)
        inputs = self._rendered(batch, valid) if self.rerender else cpu_batch(batch).select(_INPUT_KEYS)
        plan = plan_micro_batches(
            inputs,
            size=self.micro_batch_size,
            budget=self.budget,
            budget_key=f"{RM}.forward_max_token_len_per_gpu",
            device=self.engine.device,
        )
        with self.engine.resident():
            outputs = self.engine.forward(plan.parts, temperature=1.0, with_entropy=False)
        scores = plan.restore([out.require("scores").cpu() for out in outputs])
        if self.rerender:  # one scored position per row: the last token of the re-rendered conversation
            placed = torch.zeros(len(batch), width, dtype=torch.float32)
            if width:
                placed[torch.arange(len(batch)), (valid.long() - 1).clamp(min=0)] = scores[:, -1].float()
            return Batch.from_dict({"rm_scores": placed})
        return Batch.from_dict({"rm_scores": last_token_scores(scores, valid)})

    def _rendered(self, batch: Batch, valid: torch.Tensor) -> Batch:
        """The conversations re-rendered with the reward model's chat template, left-padded, with the last
        token as a one-token "response" (the position the score is read at)."""
        if "raw_prompt" not in batch:
            raise RLCoreError(
                "the reward model's tokenizer differs from the policy's, so responses are re-rendered from the chat "
                "messages, but the batch has no raw_prompt: set data.return_raw_chat=true"
            )
        responses = batch["responses"]
        texts = self.input_tokenizer.batch_decode(
            [responses[i, : int(valid[i])].tolist() for i in range(len(batch))], skip_special_tokens=True
        )
        rows = []
        for messages, text in zip(batch["raw_prompt"], texts, strict=True):
            chat = [*list(messages), {"role": "assistant", "content": text}]
            rendered = self.tokenizer.apply_chat_template(chat, tokenize=False)
            ids = self.tokenizer(rendered, add_special_tokens=False)["input_ids"]
            rows.append(ids[-self.max_length :] if self.max_length else ids)
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        input_ids, mask = left_pad(rows, pad)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        return Batch.from_dict(
            {"input_ids": input_ids, "attention_mask": mask, "position_ids": positions, "responses": input_ids[:, -1:]}
        )


#: the tensors a reward-model forward pass reads
_INPUT_KEYS = ["input_ids", "attention_mask", "position_ids", "responses"]
