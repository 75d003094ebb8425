"""What defines a run, recorded in each of its checkpoints, so that a run resumes only a checkpoint of its own.

A run's *fingerprint* (:func:`run_fingerprint`) holds, under :data:`FINGERPRINT_KEYS`:

- ``kind``: ``rl`` (``rlcore run``) or ``sft`` (``rlcore sft``);
- ``model``: the model's path (absolute for a local folder) or hub name, and ``weights``: a digest of its
  weight files (:func:`weights_digest`; None for a hub name);
- ``tokenizer``: the tokenizer's path and a digest of its files;
- ``algorithm``: what the loss is made of (the estimator, the policy loss, the KL terms; for SFT ``sft``);
- ``data``: the training files (absolute paths);
- ``shape``: the model's shape (:func:`model_shape`: sizes, layers, heads, experts).

Each checkpoint's ``run.json`` carries the fingerprint of the run that wrote it. Before a run resumes a
checkpoint, :func:`accept_checkpoint` compares the two: ``trainer.resume_mode=auto`` resumes only a matching
checkpoint (otherwise the run starts fresh, and says so in one line naming the keys that differ), and a
checkpoint named by ``trainer.resume_from_path`` that does not match is an error naming them, unless
``trainer.resume_allow_changes`` lists them. ``kind`` and ``shape`` can never be allowed to differ: such a
checkpoint cannot be loaded into this run's model.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import click

from rlcore.checkpoint.manager import CheckpointError
from rlcore.checkpoint.ownership import read_run_record

#: the parts of a fingerprint, in the order messages name them
FINGERPRINT_KEYS: tuple[str, ...] = ("kind", "model", "weights", "tokenizer", "algorithm", "data", "shape")
#: the parts that ``trainer.resume_allow_changes`` may list (``kind`` and ``shape`` must always match), and
#: ``unrecorded``: a checkpoint that records no fingerprint (written by an older rlcore, or not by rlcore)
ALLOWABLE_CHANGES: tuple[str, ...] = ("model", "weights", "tokenizer", "algorithm", "data", "unrecorded")
#: the model config fields that make up a model's shape (a checkpoint loads only into a model of the same shape)
MODEL_SHAPE_KEYS: tuple[str, ...] = (
    "model_type",
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "tie_word_embeddings",
    # mixture of experts (Qwen2/3-MoE, OLMoE, Mixtral, DeepSeek)
    "num_experts",
    "num_local_experts",
    "n_routed_experts",
    "n_shared_experts",
    "num_experts_per_tok",
    "moe_intermediate_size",
    "shared_expert_intermediate_size",
    "decoder_sparse_step",
    "mlp_only_layers",
    "first_k_dense_replace",
)
#: the nested configs of a composite model (a vision-language model's language and vision parts)
_NESTED_CONFIGS: tuple[str, ...] = ("text_config", "vision_config")
#: the files that hold a model's weights
_WEIGHT_SUFFIXES: tuple[str, ...] = (".safetensors", ".bin", ".pt", ".pth")
#: the files that define a tokenizer
_TOKENIZER_FILES: tuple[str, ...] = (
    "tokenizer.json",
    "tokenizer_config.json",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
    "special_tokens_map.json",
    "added_tokens.json",
    "chat_template.jinja",
)
#: bytes read at each of the start, middle and end of a weight file for its digest
_SAMPLE_BYTES = 1 << 20


def model_shape(model_config: Mapping[str, Any]) -> dict[str, Any]:
    """The shape of a model from its config as a dict (``config.json``'s contents): the fields of
    :data:`MODEL_SHAPE_KEYS` it has, also inside its ``text_config``/``vision_config`` (named
    ``text_config.hidden_size``); {} for an empty config."""
    shape = {key: model_config[key] for key in MODEL_SHAPE_KEYS if key in model_config}
    for nested in _NESTED_CONFIGS:
        inner = model_config.get(nested)
        if isinstance(inner, Mapping):
            shape.update({f"{nested}.{key}": inner[key] for key in MODEL_SHAPE_KEYS if key in inner})
    return shape


def local_path(name: str | os.PathLike[str] | None) -> str | None:
    """``name`` as an absolute path when it names something on this machine, else as given (a hub name)."""
    if name is None or str(name) == "":
        return None
    path = Path(str(name)).expanduser()
    return str(path.resolve()) if path.exists() else str(name)


def _sampled_sha256(path: Path) -> str:
    """SHA-256 of a file's size and of up to 1 MiB at its start, middle and end (all of a small file): weights
    that training changed differ everywhere, and a file of gigabytes is not read whole."""
    size = path.stat().st_size
    digest = hashlib.sha256(str(size).encode())
    with path.open("rb") as handle:
        if size <= 3 * _SAMPLE_BYTES:
            digest.update(handle.read())
        else:
            for offset in (0, size // 2, size - _SAMPLE_BYTES):
                handle.seek(offset)
                digest.update(handle.read(_SAMPLE_BYTES))
    return digest.hexdigest()


def _files_digest(files: Iterable[Path]) -> str | None:
    """One digest of the named files (each by name and :func:`_sampled_sha256`); None when there are none."""
    digest = hashlib.sha256()
    found = False
    for file in sorted(files):
        digest.update(file.name.encode() + b"\0" + _sampled_sha256(file).encode() + b"\n")
        found = True
    return digest.hexdigest()[:16] if found else None


def weights_digest(model_path: str | None) -> str | None:
    """A digest of the weight files (``*.safetensors``, ``*.bin``, ``*.pt``) in a local model folder; None for a
    hub name or a folder without weights."""
    folder = Path(model_path) if model_path else None
    if folder is None or not folder.is_dir():
        return None
    return _files_digest(p for p in folder.iterdir() if p.is_file() and p.suffix in _WEIGHT_SUFFIXES)


def tokenizer_identity(tokenizer_path: str | None) -> dict[str, Any]:
    """``{"path", "digest"}`` of a tokenizer: its path (absolute when local) and a digest of its files
    (None for a hub name)."""
    path = local_path(tokenizer_path)
    folder = Path(path) if path else None
    digest = None
    if folder is not None and folder.is_dir():
        digest = _files_digest(folder / name for name in _TOKENIZER_FILES if (folder / name).is_file())
    return {"path": path, "digest": digest}


def run_fingerprint(
    kind: str,
    *,
    model_path: str,
    tokenizer_path: str | None,
    algorithm: Mapping[str, Any],
    train_files: Any,
    shape: Mapping[str, Any],
) -> dict[str, Any]:
    """The fingerprint of a run (see the module docstring); ``train_files`` is one path or a list of them. It is
    plain JSON data (tuples as lists), so that it equals the one read back from a checkpoint's ``run.json``."""
    files = [train_files] if isinstance(train_files, str | os.PathLike) else list(train_files or [])
    model = local_path(model_path)
    fingerprint = {
        "kind": kind,
        "model": model,
        "weights": weights_digest(model),
        "tokenizer": tokenizer_identity(tokenizer_path or model_path),
        "algorithm": dict(algorithm),
        "data": [local_path(str(f)) for f in files],
        "shape": dict(shape),
    }
    return dict(json.loads(json.dumps(fingerprint, default=str)))


def _short(value: Any) -> str:
    """A value as messages show it: a list of one item as the item, text over 240 characters cut in the middle
    (paths stay whole)."""
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    text = str(value)
    return text if len(text) <= 240 else f"{text[:100]}...{text[-130:]}"


def _difference(key: str, saved: Any, current: Any) -> str:
    """``key (checkpoint value -> this run's)``; for a mapping only its entries that differ."""
    if isinstance(saved, Mapping) and isinstance(current, Mapping):
        names = [k for k in dict.fromkeys([*saved, *current]) if saved.get(k) != current.get(k)]
        parts = ", ".join(f"{k} {_short(saved.get(k))} -> {_short(current.get(k))}" for k in names)
        return f"{key} ({parts})"
    if key == "weights":
        return "weights (the model's weight files are not the ones the checkpoint's run started from)"
    return f"{key} ({_short(saved)} -> {_short(current)})"


def differences(saved: Mapping[str, Any] | None, current: Mapping[str, Any]) -> dict[str, str]:
    """The parts of ``current`` that ``saved`` (a checkpoint's fingerprint; None: it records none) does not
    match, each with a description; ``{"unrecorded": ...}`` when there is no saved fingerprint."""
    if saved is None:
        return {"unrecorded": "unrecorded (the checkpoint records no fingerprint of its run: an older rlcore wrote it)"}
    return {
        key: _difference(key, saved.get(key), current.get(key))
        for key in FINGERPRINT_KEYS
        if saved.get(key) != current.get(key)
    }


def checkpoint_fingerprint(checkpoint: Path) -> dict[str, Any] | None:
    """The fingerprint in a checkpoint's ``run.json``; None when it records none."""
    record = read_run_record(checkpoint) or {}
    fingerprint = record.get("fingerprint")
    return fingerprint if isinstance(fingerprint, dict) else None


def check_allowed(allow: Iterable[str]) -> list[str]:
    """``trainer.resume_allow_changes`` as a list; an error names a value that is not an allowable part."""
    values = [str(v) for v in allow or []]
    wrong = [v for v in values if v not in ALLOWABLE_CHANGES]
    if wrong:
        never = " (kind and shape must always match)" if set(wrong) & {"kind", "shape"} else ""
        raise CheckpointError(
            f"trainer.resume_allow_changes={values}: {', '.join(wrong)} cannot be allowed{never}; "
            f"choose from {', '.join(ALLOWABLE_CHANGES)}"
        )
    return values


def accept_checkpoint(
    checkpoint: Path, current: Mapping[str, Any], *, resume_mode: str, allow: Iterable[str] = ()
) -> Path | None:
    """``checkpoint`` when this run (fingerprint ``current``) may resume it; None, after a line saying why, when
    ``resume_mode`` is ``auto`` and it may not (the run starts fresh, and moves the checkpoint's lineage aside).

    The parts listed in ``allow`` (``trainer.resume_allow_changes``) may differ; a resume that relies on that
    says so. Raises :class:`CheckpointError` naming the parts that differ for a checkpoint the run was told to
    resume (``trainer.resume_from_path``).
    """
    allowed = check_allowed(allow)
    found = differences(checkpoint_fingerprint(checkpoint), current)
    if not found:
        return checkpoint
    blocking = {key: text for key, text in found.items() if key not in allowed}
    if not blocking:
        click.echo(
            f"resuming {checkpoint}, which trainer.resume_allow_changes lets differ: {'; '.join(found.values())}"
        )
        return checkpoint
    what = "; ".join(blocking.values())
    fixed = sorted(set(blocking) & {"kind", "shape"})
    override = "" if fixed else f"; trainer.resume_allow_changes=[{','.join(sorted({*blocking, *allowed}))}] resumes it"
    if resume_mode == "auto":
        click.echo(f"not resuming {checkpoint}, another run's: {what}; this is a fresh run{override}")
        return None
    if not fixed:
        raise CheckpointError(f"trainer.resume_from_path={checkpoint} is another run's: {what}{override} anyway")
    raise CheckpointError(
        f"trainer.resume_from_path={checkpoint} cannot be resumed by this run: {what}; {_instead(current, fixed)}, "
        "or set trainer.resume_mode=disable to start over"
    )


def _instead(current: Mapping[str, Any], fixed: list[str]) -> str:
    """What to do instead of resuming a checkpoint whose ``fixed`` parts (kind, shape) differ from this run's
    (``current``: this run's fingerprint)."""
    if "kind" not in fixed:
        return "resume it with the model it was written for"
    if current.get("kind") == "rl":
        return (
            "a checkpoint of another kind (rlcore sft's) trains on with its own command, and rlcore run starts from "
            "its exported model (actor_rollout_ref.model.path=<checkpoint>/actor/huggingface)"
        )
    if current.get("kind") == "sft":
        return (
            "a checkpoint of another kind (rlcore run's) trains on with its own command, and rlcore sft starts from "
            "its exported model (model.partial_pretrain=<checkpoint>/actor/huggingface)"
        )
    return "resume it with the command that wrote it"
