"""The built-in prompt dataset (component ``dataset`` ``rl``): verl-schema rows from parquet or jsonl files.

A row holds ``prompt`` (a list of ``{role, content}`` chat messages; the key is ``data.prompt_key``),
``data_source`` (``data.reward_fn_key``; picks the reward scorer), ``reward_model``
(``{style, ground_truth}``), and optionally ``extra_info`` (a dict) and ``ability``. Every row is
validated and chat-templated when the dataset is built, so bad data fails before the first step with a
message naming the file, the row and the key.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args

import numpy as np
import torch

from rlcore.config.schema import Truncation
from rlcore.config.sections.base import to_plain
from rlcore.data import DataError, multimodal
from rlcore.data.files import DATA_EXTENSIONS, PARQUET_EXTENSIONS, normalize_files

logger = logging.getLogger(__name__)

TRUNCATION_MODES: tuple[str, ...] = get_args(Truncation)


@dataclass(frozen=True)
class RowOrigin:
    """Where a row came from: its file, its 0-based row index in that file and (jsonl) its line number."""

    file: str
    row: int
    line: int | None = None

    def __str__(self) -> str:
        where = f"{self.file}, row {self.row}"
        return f"{where} (line {self.line})" if self.line is not None else where


@dataclass
class _Row:
    prompt: list[dict[str, Any]]
    data_source: str
    reward_model: dict[str, Any]
    extra_info: dict[str, Any]
    index: Any
    origin: RowOrigin
    images: list[Any]
    agent_name: str | None = None
    videos: list[Any] = dataclasses.field(default_factory=list)


def config_value(config: Any, key: str, default: Any) -> Any:
    """``config.get(key, default)`` for a DictConfig, a dict or ``None``; a ``null`` value gives ``default``."""
    if config is None:
        return default
    value = config.get(key, default)
    return default if value is None else value


def check_unicode(text: str, where: str) -> None:
    """Raise a :class:`DataError` naming ``where`` when ``text`` is not valid Unicode: a lone surrogate (half
    of a UTF-16 pair, which valid JSON can hold as ``"\\ud800"``) that no tokenizer can encode."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = text[exc.start]
        raise DataError(
            f"{where} holds invalid Unicode: a lone surrogate U+{ord(bad):04X} at character {exc.start} (half of "
            "a UTF-16 pair, e.g. a JSON '\\ud800' escape), which no tokenizer can encode; fix the text in the file"
        ) from None


def tokenizer_failure(where: str, key: str, exc: Exception) -> DataError:
    """The error for a tokenizer that raised on the text of ``where`` (file and row) under config ``key``."""
    lines = str(exc).strip().splitlines()
    return DataError(f"{where}: the tokenizer failed on {key}: {type(exc).__name__}: {lines[0] if lines else ''}")


def read_rows(path: str) -> tuple[list[Any], list[RowOrigin]]:
    """Read every record of one ``.parquet``, ``.jsonl`` or ``.json`` file, with each record's origin.

    A ``.json`` file may hold a JSON array of objects or one object per line. Errors name the file
    (and the line for JSON syntax errors).
    """
    p = Path(path)
    ext = p.suffix.lower()
    if not p.exists():
        raise DataError(f"{path}: data file does not exist")
    if ext not in DATA_EXTENSIONS:
        raise DataError(f"{path}: unsupported data file extension {ext or '(none)'!r}; use .parquet, .jsonl or .json")
    if not p.is_file():
        raise DataError(f"{path}: not a regular file")
    if ext in PARQUET_EXTENSIONS:
        import pyarrow.parquet as pq

        try:
            records = pq.read_table(p).to_pylist()
        except Exception as exc:  # pyarrow raises ArrowInvalid, OSError, ...
            raise DataError(f"{path}: cannot read parquet file: {type(exc).__name__}: {exc}") from exc
        return records, [RowOrigin(path, i) for i in range(len(records))]
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: cannot read file: {type(exc).__name__}: {exc}") from exc
    if ext == ".json" and text.lstrip().startswith("["):
        try:
            records = json.loads(text)
        except json.JSONDecodeError as exc:
            raise DataError(f"{path}, line {exc.lineno}: invalid JSON: {exc.msg}") from exc
        return records, [RowOrigin(path, i) for i in range(len(records))]
    records = []
    origins: list[RowOrigin] = []
    for line_no, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise DataError(f"{path}, line {line_no}: invalid JSON: {exc.msg}") from exc
        origins.append(RowOrigin(path, len(origins), line_no))
    return records, origins


def truncate_ids(ids: Sequence[int], max_length: int, mode: str) -> list[int]:
    """Cut ``ids`` to ``max_length`` tokens: ``left`` keeps the tail, ``right`` the head, ``middle`` half of
    each end (the extra token, for an odd length, goes to the tail). ``error`` and short inputs return
    the ids unchanged."""
    ids = list(ids)
    if len(ids) <= max_length or mode == "error":
        return ids
    if mode == "left":
        return ids[-max_length:]
    if mode == "right":
        return ids[:max_length]
    if mode == "middle":
        head = max_length // 2
        tail = max_length - head
        return ids[:head] + (ids[-tail:] if tail else [])
    raise DataError(f"data.truncation={mode!r} is not one of {', '.join(TRUNCATION_MODES)}")


def left_pad(ids: Sequence[int], length: int, pad_token_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Left-pad ``ids`` to ``length``; returns ``(input_ids, attention_mask, position_ids)`` as LongTensors
    with ``position_ids = clip(cumsum(mask) - 1, 0)``."""
    n = len(ids)
    if n > length:
        raise DataError(f"cannot left-pad {n} tokens into {length} positions")
    input_ids = torch.full((length,), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros(length, dtype=torch.long)
    if n:
        input_ids[length - n :] = torch.as_tensor(list(ids), dtype=torch.long)
        attention_mask[length - n :] = 1
    position_ids = torch.clamp(torch.cumsum(attention_mask, dim=0) - 1, min=0)
    return input_ids, attention_mask, position_ids


class RLDataset:
    """verl-schema prompt rows from parquet/jsonl files, chat-templated and left-padded.

    Args:
        files: one path or a list of ``.parquet`` / ``.jsonl`` / ``.json`` paths, concatenated in order; a
            folder stands for the data files in it (:mod:`rlcore.data.files`).
        tokenizer: a Hugging Face tokenizer with a chat template and a pad (or eos) token.
        config: the ``data`` config section (a DictConfig or dict; missing keys take verl's defaults).
        split: ``"train"`` or a validation split name (``"val"``, ``"test"``); selects
            ``train_max_samples``/``shuffle`` versus ``val_max_samples``/``validation_shuffle``.
        processor: the model's multimodal processor (``None`` for text-only models); rows with images
            (``data.image_key``) need it, see :mod:`rlcore.data.multimodal`.

    Rows are validated and tokenised eagerly (the chat template is rendered with
    ``add_generation_prompt=True`` and tokenised without special tokens). With
    ``filter_overlong_prompts`` rows longer than ``max_prompt_length`` are dropped (``num_filtered``
    says how many); otherwise ``truncation`` decides: ``left``/``right``/``middle`` cut the token ids when
    a row is read, ``error`` raises here for the first overlong row.

    ``self[i]`` returns ``input_ids``, ``attention_mask``, ``position_ids`` (LongTensors of length
    ``max_prompt_length``, left-padded), ``raw_prompt_ids`` (the unpadded, truncated ids),
    ``raw_prompt`` (the messages, when ``return_raw_chat``), ``data_source``, ``reward_model``,
    ``extra_info`` and ``index`` (``extra_info["index"]`` or the row's number across the files). When any
    row has images or videos (``data.video_key``), every row also has ``multi_modal_data`` (``{"image": [PIL
    images]}``, with videos ``{"video": [lists of frames]}``: :func:`~rlcore.data.multimodal.media_data`) and
    ``multi_modal_inputs`` (the processor's ``pixel_values`` and ``image_grid_thw``; ``pixel_values_videos``
    and ``video_grid_thw``), ``None`` for text rows; such a row's ids hold its image and video tokens, which
    count towards ``max_prompt_length``. When any row names
    an agent loop (verl's ``agent_name`` column), every row has ``agent_name`` (``None``: the default loop).
    """

    def __init__(
        self, files: Any, tokenizer: Any, config: Any = None, split: str = "train", processor: Any = None
    ) -> None:
        self.split = split
        self.files = normalize_files(files, split)
        self.tokenizer = tokenizer
        self.prompt_key: str = config_value(config, "prompt_key", "prompt")
        self.reward_fn_key: str = config_value(config, "reward_fn_key", "data_source")
        self.max_prompt_length = int(config_value(config, "max_prompt_length", 512))
        self.truncation: str = config_value(config, "truncation", "error")
        self.filter_overlong_prompts = bool(config_value(config, "filter_overlong_prompts", False))
        self.return_raw_chat = bool(config_value(config, "return_raw_chat", True))
        template_kwargs = to_plain(config_value(config, "apply_chat_template_kwargs", {}))
        self.chat_template_kwargs: dict[str, Any] = dict(template_kwargs)
        self.processor = processor
        self.image_key: str = config_value(config, "image_key", "images")
        self.video_key: str = config_value(config, "video_key", multimodal.VIDEO_COLUMN)
        self.image_patch_size: int | None = config_value(config, "image_patch_size", None)
        is_train = split == "train"
        self.max_samples = int(config_value(config, "train_max_samples" if is_train else "val_max_samples", -1))
        self.shuffle = bool(config_value(config, "shuffle" if is_train else "validation_shuffle", is_train))
        self.seed = int(config_value(config, "seed", 1))
        if self.truncation not in TRUNCATION_MODES:
            raise DataError(f"data.truncation={self.truncation!r} is not one of {', '.join(TRUNCATION_MODES)}")
        if self.image_patch_size is not None and (
            isinstance(self.image_patch_size, bool)
            or not isinstance(self.image_patch_size, int)
            or self.image_patch_size <= 0
        ):
            raise DataError(f"data.image_patch_size must be a positive integer or null, got {self.image_patch_size!r}")
        if self.max_prompt_length <= 0:
            raise DataError(f"data.max_prompt_length must be positive, got {self.max_prompt_length}")
        pad = getattr(tokenizer, "pad_token_id", None)
        if pad is None:
            pad = getattr(tokenizer, "eos_token_id", None)
        if pad is None:
            raise DataError("the tokenizer has neither a pad token nor an eos token to pad prompts with")
        self.pad_token_id = int(pad)

        records, origins = [], []
        for path in self.files:
            file_records, file_origins = read_rows(path)
            records += file_records
            origins += file_origins
        if not records:
            raise DataError(f"{split} data {', '.join(self.files)}: no rows")
        numbers = self._select(len(records))
        rows = [self._parse_row(records[n], origins[n], n) for n in numbers]
        ids = self._tokenize(rows)
        self.num_filtered = 0
        if self.filter_overlong_prompts:
            keep = [i for i, row_ids in enumerate(ids) if len(row_ids) <= self.max_prompt_length]
            self.num_filtered = len(rows) - len(keep)
            if self.num_filtered:
                logger.warning(
                    "%s data: dropped %d of %d rows whose chat-templated prompt is longer than "
                    "data.max_prompt_length=%d (data.filter_overlong_prompts=true)",
                    split,
                    self.num_filtered,
                    len(rows),
                    self.max_prompt_length,
                )
            rows = [rows[i] for i in keep]
            ids = [ids[i] for i in keep]
            if not rows:
                raise DataError(
                    f"{split} data {', '.join(self.files)}: every row is longer than "
                    f"data.max_prompt_length={self.max_prompt_length}"
                )
        elif self.truncation == "error":
            for row, row_ids in zip(rows, ids):
                if len(row_ids) > self.max_prompt_length:
                    raise DataError(
                        f"{row.origin}: the chat-templated prompt has {len(row_ids)} tokens, more than "
                        f"data.max_prompt_length={self.max_prompt_length} (data.truncation=error); raise "
                        "max_prompt_length, set data.truncation=left|right|middle or "
                        "data.filter_overlong_prompts=true"
                    )
        else:
            for row, row_ids in zip(rows, ids):
                if (row.images or row.videos) and len(row_ids) > self.max_prompt_length:
                    raise DataError(
                        f"{row.origin}: the prompt with its images or videos has {len(row_ids)} tokens, more than "
                        f"data.max_prompt_length={self.max_prompt_length}, and cutting it would cut image tokens; "
                        "raise max_prompt_length or set data.filter_overlong_prompts=true"
                    )
        self.has_images = any(row.images or row.videos for row in rows)
        self.has_agent_names = any(row.agent_name for row in rows)
        self._rows = rows
        self._ids = ids

    def _select(self, n: int) -> list[int]:
        """Row numbers kept by ``max_samples``: the first N, or a seeded random subset when shuffling."""
        if self.max_samples < 0 or self.max_samples >= n:
            return list(range(n))
        if self.shuffle:
            chosen = np.random.default_rng(self.seed).choice(n, size=self.max_samples, replace=False)
            return sorted(int(i) for i in chosen)
        return list(range(self.max_samples))

    def _parse_row(self, record: Any, origin: RowOrigin, number: int) -> _Row:
        """Validate one record against the verl schema; errors name the file, row and key."""
        if not isinstance(record, Mapping):
            raise DataError(f"{origin}: expected an object with key {self.prompt_key!r}, got {type(record).__name__}")
        if self.prompt_key not in record or record[self.prompt_key] is None:
            raise DataError(f"{origin}: missing key {self.prompt_key!r} (data.prompt_key); row keys: {sorted(record)}")
        messages = record[self.prompt_key]
        if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
            raise DataError(
                f"{origin}: key {self.prompt_key!r} must be a list of {{role, content}} chat messages, "
                f"got {type(messages).__name__}"
            )
        if not messages:
            raise DataError(f"{origin}: key {self.prompt_key!r} is empty (no chat messages)")
        prompt = []
        for j, message in enumerate(messages):
            if not isinstance(message, Mapping):
                raise DataError(f"{origin}: key {self.prompt_key!r}[{j}] must be a {{role, content}} object")
            for field in ("role", "content"):
                if not isinstance(message.get(field), str):
                    raise DataError(
                        f"{origin}: key {self.prompt_key!r}[{j}] has no string {field!r} "
                        f"(message keys: {sorted(message)})"
                    )
                check_unicode(message[field], f"{origin}: key {self.prompt_key!r}[{j}].{field} (data.prompt_key)")
            prompt.append(dict(message))
        if not any(m["content"].strip() for m in prompt):
            raise DataError(f"{origin}: key {self.prompt_key!r} is an empty prompt (every message content is empty)")

        data_source = record.get(self.reward_fn_key)
        if not isinstance(data_source, str) or not data_source:
            raise DataError(
                f"{origin}: missing key {self.reward_fn_key!r} (data.reward_fn_key): the reward scorer is chosen by it"
            )
        reward_model = record.get("reward_model")
        if not isinstance(reward_model, Mapping):
            raise DataError(f"{origin}: missing key 'reward_model' ({{style, ground_truth}}): the reward needs it")
        if reward_model.get("style", "rule") != "model" and "ground_truth" not in reward_model:
            raise DataError(f"{origin}: missing key 'reward_model.ground_truth' (needed by rule-based rewards)")
        extra_info = record.get("extra_info")
        if extra_info is None:
            extra_info = {}
        if not isinstance(extra_info, Mapping):
            raise DataError(f"{origin}: key 'extra_info' must be an object, got {type(extra_info).__name__}")
        extra_info = dict(extra_info)
        index = extra_info.get("index")
        agent_name = record.get("agent_name")
        if agent_name is not None and not isinstance(agent_name, str):
            raise DataError(
                f"{origin}: key 'agent_name' must be the name of an agent loop (a string) or null, "
                f"got {type(agent_name).__name__}"
            )
        images = multimodal.image_list(record.get(self.image_key), str(origin), self.image_key)
        videos = multimodal.image_list(record.get(self.video_key), str(origin), self.video_key, "video")
        return _Row(
            prompt=prompt,
            data_source=data_source,
            reward_model=dict(reward_model),
            extra_info=extra_info,
            index=number if index is None else index,
            origin=origin,
            images=images,
            agent_name=agent_name or None,
            videos=videos,
        )

    def _is_image_row(self, row: _Row) -> bool:
        """Whether the processor renders ``row``: it has images or videos, or ``<image>``/``<video>``
        placeholders and a processor."""
        if row.images or row.videos:
            return True
        placeholders = (multimodal.IMAGE_PLACEHOLDER, multimodal.VIDEO_PLACEHOLDER)
        return self.processor is not None and any(p in m["content"] for m in row.prompt for p in placeholders)

    def _render(self, row: _Row) -> multimodal.RenderedRow:
        """Render an image or video row with the processor (its ids, images, videos and pixel tensors)."""
        if self.processor is None:
            key, what = (self.image_key, "images") if row.images or not row.videos else (self.video_key, "videos")
            raise DataError(
                f"{row.origin}: key {key!r} holds {what} but the model has no multimodal processor "
                "(no preprocessor_config.json next to actor_rollout_ref.model.path)"
            )
        return multimodal.render_row(
            self.processor,
            row.prompt,
            row.images,
            where=str(row.origin),
            key=self.image_key,
            base_dir=Path(row.origin.file).parent,
            chat_template_kwargs=self.chat_template_kwargs,
            videos=row.videos,
            video_key=self.video_key,
            image_patch_size=self.image_patch_size,
        )

    def _tokenize(self, rows: list[_Row]) -> list[np.ndarray]:
        """Render each prompt with the chat template and tokenise all text rows in one batched call (image
        rows go through the processor one by one)."""
        texts = []
        rendered: dict[int, list[int]] = {}
        for i, row in enumerate(rows):
            if self._is_image_row(row):
                rendered[i] = self._render(row).input_ids
                continue
            try:
                text = self.tokenizer.apply_chat_template(
                    row.prompt, add_generation_prompt=True, tokenize=False, **self.chat_template_kwargs
                )
            except Exception as exc:  # jinja errors, missing template
                raise DataError(
                    f"{row.origin}: the tokenizer's chat template failed on key {self.prompt_key!r}: "
                    f"{type(exc).__name__}: {exc}"
                ) from exc
            texts.append(text)
        text_rows = [row for i, row in enumerate(rows) if i not in rendered]
        encoded = iter(self._encode_texts(texts, text_rows))
        return [np.asarray(rendered[i] if i in rendered else next(encoded), dtype=np.int64) for i in range(len(rows))]

    def _encode_texts(self, texts: list[str], rows: list[_Row]) -> list[list[int]]:
        """Token ids of the rendered ``texts`` of ``rows`` in one batched call; when the tokenizer fails, each
        text alone, so that the error names the row at fault."""
        if not texts:
            return []
        try:
            return list(self.tokenizer(texts, add_special_tokens=False)["input_ids"])
        except Exception as batch_exc:  # TypeError for text it cannot encode, ValueError, ...
            for text, row in zip(texts, rows):
                try:
                    self.tokenizer([text], add_special_tokens=False)
                except Exception as exc:
                    raise tokenizer_failure(str(row.origin), f"key {self.prompt_key!r} (data.prompt_key)", exc) from exc
            where = f"{self.split} data {', '.join(self.files)}"
            raise tokenizer_failure(where, f"key {self.prompt_key!r} (data.prompt_key)", batch_exc) from batch_exc

    def __len__(self) -> int:
        """Number of rows after ``max_samples`` and the overlong filter."""
        return len(self._rows)

    def prompt_length(self, i: int) -> int:
        """Token count of row ``i``'s chat-templated prompt before truncation."""
        return len(self._ids[i])

    def origin(self, i: int) -> RowOrigin:
        """The file and row that row ``i`` was read from."""
        return self._rows[i].origin

    def __getitem__(self, i: int) -> dict[str, Any]:
        """Row ``i`` as tensors (left-padded to ``max_prompt_length``) plus its Python fields."""
        if not -len(self) <= i < len(self):
            raise IndexError(f"{self.split} dataset index {i} out of range for {len(self)} rows")
        row = self._rows[i]
        kept = truncate_ids(self._ids[i].tolist(), self.max_prompt_length, self.truncation)
        input_ids, attention_mask, position_ids = left_pad(kept, self.max_prompt_length, self.pad_token_id)
        item: dict[str, Any] = {
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "position_ids": position_ids,
            "raw_prompt_ids": kept,
        }
        if self.has_images:
            rendered = self._render(row) if self._is_image_row(row) else None
            item[multimodal.MULTI_MODAL_DATA] = multimodal.media_data(rendered) if rendered else None
            item[multimodal.MULTI_MODAL_INPUTS] = rendered.inputs if rendered else None
        if self.return_raw_chat:
            item["raw_prompt"] = copy.deepcopy(row.prompt)
        item["data_source"] = row.data_source
        item["reward_model"] = copy.deepcopy(row.reward_model)
        item["extra_info"] = copy.deepcopy(row.extra_info)
        item["index"] = row.index
        if self.has_agent_names:
            item["agent_name"] = row.agent_name
        return item
