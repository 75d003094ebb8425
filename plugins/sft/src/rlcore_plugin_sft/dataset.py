"""SFT data: single-turn prompt/response rows or multi-turn chats, from parquet or jsonl, tokenized once.

Single-turn rows (verl's ``SFTDataset``) hold a prompt column (``data.prompt_key``) and a response column
(``data.response_key``), strings, or dicts descended with ``data.prompt_dict_keys`` /
``data.response_dict_keys``. The prompt is rendered as one user message with the chat template's
generation prompt; the response is appended with the tokenizer's EOS token. The loss covers the response
tokens and the EOS.

Multi-turn rows (``data.multiturn.enable``, verl's ``MultiTurnSFTDataset``) hold a list of
``{role, content}`` messages (``data.multiturn.messages_key``), optionally tool schemas
(``multiturn.tools_key``) and an ``enable_thinking`` flag (``multiturn.enable_thinking_key``) that are
passed to the chat template. The whole chat is rendered once; the loss covers exactly the tokens the
model would generate for each assistant turn — from the end of the template's generation prompt before it
through the tokenizer's EOS (end-of-turn) token; what the template writes after that (a newline) is not
trained. This is the mask convention of rlcore's multi-turn rollouts, and the same audit checks it
(:func:`rlcore.api.audit_batch` on :func:`sft_batch`'s output). Each assistant turn must render as a
prefix of the whole chat, token for token, otherwise the row is rejected naming the file, the row and the
turn.

:func:`rlcore.api.mask_spans` and :meth:`SFTDataset.loss_texts` expose the mask for auditing. Every error names the
file, the row and the key.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from rlcore.api import (
    Batch,
    DataError,
    RowOrigin,
    check_unicode,
    config_value,
    mask_spans,
    normalize_files,
    read_rows,
    to_plain,
    tokenizer_failure,
)

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Example:
    """One tokenized sequence and where it came from.

    Attributes:
        input_ids: the whole sequence's token ids.
        loss_mask: 1 on the tokens the loss trains (the first token never: nothing predicts it).
        origin: the file and row.
    """

    input_ids: list[int]
    loss_mask: list[int]
    origin: RowOrigin


def _descend(value: Any, keys: Sequence[str], column: str, origin: RowOrigin, dict_key: str) -> Any:
    """``value[k1][k2]...`` for the ``*_dict_keys``; errors name the row, the column and the key."""
    for key in keys:
        if not isinstance(value, Mapping) or key not in value:
            raise DataError(f"{origin}: column {column!r} has no key {key!r} ({dict_key})")
        value = value[key]
    return value


class SFTDataset:
    """The SFT rows of ``files`` (a path or list of parquet/jsonl files, or folders of them:
    :func:`rlcore.api.normalize_files`), tokenized with ``tokenizer``.

    ``config`` is the ``data`` section of the SFT config; ``split`` is ``train`` or ``val`` (messages,
    ``*_max_samples``). ``dataset[i]`` is ``{"input_ids": list, "loss_mask": list}``, which
    :func:`sft_batch` pads into a :class:`~rlcore.api.batch.Batch`.
    """

    def __init__(self, files: Any, tokenizer: Any, config: Any, split: str = "train") -> None:
        self.tokenizer = tokenizer
        self.split = split
        self.multiturn = bool(config_value(config_value(config, "multiturn", {}), "enable", False))
        multiturn = config_value(config, "multiturn", {})
        self.messages_key = str(config_value(multiturn, "messages_key", "messages"))
        self.tools_key = str(config_value(multiturn, "tools_key", "tools"))
        self.thinking_key = str(config_value(multiturn, "enable_thinking_key", "enable_thinking"))
        self.prompt_key = str(config_value(config, "prompt_key", "question"))
        self.response_key = str(config_value(config, "response_key", "answer"))
        self.prompt_dict_keys = list(to_plain(config_value(config, "prompt_dict_keys", [])))
        self.response_dict_keys = list(to_plain(config_value(config, "response_dict_keys", [])))
        self.max_length = int(config_value(config, "max_length", 1024))
        self.truncation = str(config_value(config, "truncation", "error"))
        self.template_kwargs = dict(to_plain(config_value(config, "apply_chat_template_kwargs", {})))
        limit = int(config_value(config, f"{'val' if split != 'train' else 'train'}_max_samples", -1))
        if tokenizer.eos_token is None:
            raise DataError("the tokenizer has no EOS token, which SFT appends to every response")
        self.eos_id = int(tokenizer.convert_tokens_to_ids(tokenizer.eos_token))
        examples: list[Example] = []
        for path in normalize_files(files, split):
            records, origins = read_rows(path)
            for record, origin in zip(records, origins):
                if 0 < limit <= len(examples):
                    break
                example = self._example(record, origin)
                if example is not None:
                    examples.append(example)
        if not examples:
            raise DataError(f"{split} data {normalize_files(files, split)}: no row has a token to train on")
        self.examples = examples

    # ------------------------------------------------------------------ rows
    def _example(self, record: Any, origin: RowOrigin) -> Example | None:
        """Tokenize one row; None when truncation left no loss token (logged)."""
        if not isinstance(record, Mapping):
            raise DataError(f"{origin}: a row must be an object, got {type(record).__name__}")
        try:
            ids, mask = self._chat(record, origin) if self.multiturn else self._single(record, origin)
        except DataError:
            raise
        except Exception as exc:  # the chat template or the tokenizer failed on this row's text
            keys = (
                f"key {self.messages_key!r} (data.multiturn.messages_key)"
                if self.multiturn
                else f"keys {self.prompt_key!r} / {self.response_key!r} (data.prompt_key / data.response_key)"
            )
            raise tokenizer_failure(str(origin), keys, exc) from exc
        if len(ids) > self.max_length:
            if self.truncation == "error":
                raise DataError(
                    f"{origin}: {len(ids)} tokens exceed data.max_length={self.max_length} "
                    "(raise it, or set data.truncation=left or right)"
                )
            keep = slice(len(ids) - self.max_length, None) if self.truncation == "left" else slice(self.max_length)
            ids, mask = ids[keep], mask[keep]
        mask = [0, *mask[1:]]
        if not any(mask):
            logger.warning("%s: no token to train on after truncation to %d tokens; row skipped", origin, len(ids))
            return None
        return Example(ids, mask, origin)

    def _text(self, record: Mapping[str, Any], key: str, dict_keys: list[str], origin: RowOrigin) -> str:
        """The string at column ``key`` (descending ``dict_keys``)."""
        if key not in record:
            raise DataError(
                f"{origin}: no column {key!r} (data.{'prompt' if key == self.prompt_key else 'response'}_key)"
            )
        kind = "prompt" if key == self.prompt_key else "response"
        value = _descend(to_plain(record[key]), dict_keys, key, origin, f"data.{kind}_dict_keys")
        if not isinstance(value, str):
            raise DataError(f"{origin}: the {kind} ({key!r}) must be a string, got {type(value).__name__}")
        check_unicode(value, f"{origin}: the {kind} ({key!r}, data.{kind}_key)")
        return value

    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def _render(self, messages: list[dict[str, Any]], generation_prompt: bool, kwargs: dict[str, Any]) -> list[int]:
        text = self.tokenizer.apply_chat_template(
            messages, add_generation_prompt=generation_prompt, tokenize=False, **self.template_kwargs, **kwargs
        )
        return self._encode(text)

    def _single(self, record: Mapping[str, Any], origin: RowOrigin) -> tuple[list[int], list[int]]:
        """A prompt rendered as one user turn with the generation prompt, then the response and EOS."""
        prompt = self._text(record, self.prompt_key, self.prompt_dict_keys, origin)
        response = self._text(record, self.response_key, self.response_dict_keys, origin)
        prompt_ids = self._render([{"role": "user", "content": prompt}], True, {})
        response_ids = self._encode(response + self.tokenizer.eos_token)
        return prompt_ids + response_ids, [0] * len(prompt_ids) + [1] * len(response_ids)

    def _chat(self, record: Mapping[str, Any], origin: RowOrigin) -> tuple[list[int], list[int]]:
        """A whole chat; the loss on the assistant turns (see the module docstring)."""
        key = self.messages_key
        if key not in record:
            raise DataError(f"{origin}: no column {key!r} (data.multiturn.messages_key)")
        messages = to_plain(record[key])
        if isinstance(messages, np.ndarray):
            messages = messages.tolist()
        if not isinstance(messages, list) or not messages:
            raise DataError(f"{origin}: {key!r} must be a non-empty list of messages")
        for number, message in enumerate(messages):
            if not isinstance(message, Mapping) or not isinstance(message.get("role"), str):
                raise DataError(f"{origin}: {key}[{number}] must be an object with a 'role' (and 'content')")
            for field in ("role", "content"):
                if isinstance(message.get(field), str):
                    check_unicode(message[field], f"{origin}: {key}[{number}].{field} (data.multiturn.messages_key)")
        messages = [dict(m) for m in messages]
        kwargs: dict[str, Any] = {}
        if record.get(self.tools_key) is not None:
            kwargs["tools"] = to_plain(record[self.tools_key])
        if record.get(self.thinking_key) is not None:
            kwargs["enable_thinking"] = bool(record[self.thinking_key])
        ids = self._render(messages, False, kwargs)
        mask = [0] * len(ids)
        turns = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
        if not turns:
            raise DataError(f"{origin}: {key!r} has no assistant message to train on")
        for turn in turns:
            start = self._render(messages[:turn], True, kwargs) if turn else []
            end = self._render(messages[: turn + 1], False, kwargs)
            if ids[: len(start)] != start or ids[: len(end)] != end:
                raise DataError(
                    f"{origin}: the chat template does not render {key}[{turn}] (assistant) as a prefix of the whole "
                    "chat, so its tokens cannot be located; use a template that renders turns independently"
                )
            stop = len(end)
            if (
                self.eos_id in ids[len(start) : stop]
            ):  # the template's text after the end-of-turn token is not generated
                stop = ids.index(self.eos_id, len(start)) + 1
            mask[len(start) : stop] = [1] * (stop - len(start))
        return ids, mask

    # ------------------------------------------------------------ interface
    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, i: int) -> dict[str, Any]:
        example = self.examples[i]
        return {"input_ids": example.input_ids, "loss_mask": example.loss_mask}

    def origin(self, i: int) -> RowOrigin:
        """Where example ``i`` came from."""
        return self.examples[i].origin

    def loss_texts(self, i: int) -> list[str]:
        """The decoded text of each span of loss tokens of example ``i`` (for auditing the mask)."""
        example = self.examples[i]
        return [self.tokenizer.decode(example.input_ids[a:b]) for a, b in mask_spans(example.loss_mask)]


def sft_batch(batch: Batch, pad_token_id: int) -> Batch:
    """Pad a collated batch of SFT rows into the tensors the training engines read.

    Each sequence is cut before its first loss token: the part before is the "prompt" (left-padded), the
    rest the "response" (right-padded), and ``response_mask`` is the loss mask over the response — the
    layout of an RL batch, so the engines compute ``log π`` of exactly the tokens they must.
    """
    rows = list(zip(batch["input_ids"], batch["loss_mask"]))
    cuts = [next(i for i, m in enumerate(mask) if m) for _, mask in rows]
    width_p = max(cuts)
    width_r = max(len(ids) - cut for (ids, _), cut in zip(rows, cuts))
    size = len(rows)
    prompts = torch.full((size, width_p), pad_token_id, dtype=torch.long)
    responses = torch.full((size, width_r), pad_token_id, dtype=torch.long)
    response_mask = torch.zeros((size, width_r), dtype=torch.long)
    attention_mask = torch.zeros((size, width_p + width_r), dtype=torch.long)
    for row, ((ids, mask), cut) in enumerate(zip(rows, cuts)):
        tail = len(ids) - cut
        prompts[row, width_p - cut :] = torch.tensor(ids[:cut], dtype=torch.long)
        responses[row, :tail] = torch.tensor(ids[cut:], dtype=torch.long)
        response_mask[row, :tail] = torch.tensor(mask[cut:], dtype=torch.long)
        attention_mask[row, width_p - cut : width_p + tail] = 1
    position_ids = (attention_mask.cumsum(-1) - 1).clamp_min(0)
    return Batch.from_dict(
        {
            "prompts": prompts,
            "responses": responses,
            "response_mask": response_mask,
            "input_ids": torch.cat([prompts, responses], dim=1),
            "attention_mask": attention_mask,
            "position_ids": position_ids,
        }
    )
