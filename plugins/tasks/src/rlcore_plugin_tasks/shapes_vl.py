"""A bundled vision-language CPU task: name the colour of the shape in a picture (preset ``shapes-vl-cpu``).

Every prompt is the same text, ``<image>What colour is the shape?``, with a generated 56x56 picture of one
square, disc or triangle in one of :data:`COLOURS` at a random place and size; only the picture tells the
answer, and the reward is 1 when the first word of the response is the shape's colour. The rows use verl's
multimodal schema (``prompt`` with an ``<image>`` placeholder, ``images`` = ``[{"bytes": png}]``).

The run starts from a tiny Qwen2-VL built from config and warm-started here (no download): first on the
right answers, so that it learns to see colours, then on a **biased teacher**, like the arithmetic task: the teacher names the right colour with probability
:data:`TEACHER_CORRECT` and the *next* colour of :data:`COLOURS` with probability :data:`TEACHER_NEXT`
(another one otherwise), so greedy decoding mostly names the wrong colour while sampling is right about a
third of the time. GRPO removes the bias, which it can only do by reading the picture, and the greedy
validation reward on held-out pictures rises. The warm-started model ships with rlcore-plugin-tasks
(``rlcore_plugin_tasks/data/shapes-vl-base``, built by :func:`build_base_model` through ``python -m
rlcore_plugin_tasks.build_base``); the parquet files are written once under ``$RLCORE_CACHE/shapes-vl-<version>``.
"""

from __future__ import annotations

import io
import random
import re
from pathlib import Path
from typing import Any, TypedDict

from rlcore.api import ground_truth_as_text
from rlcore_plugin_tasks.arith import cache_dir as _arith_cache_dir
from rlcore_plugin_tasks.warm_start import Heartbeat, build_task_data, cpu_task_preset

TASK_VERSION = "v1"
DATA_SOURCE = "rlcore/shapes_vl"
COLOURS = {"red": (220, 40, 40), "green": (40, 170, 60), "blue": (40, 70, 220), "yellow": (230, 200, 40)}
SHAPES = ("square", "disc", "triangle")
QUESTION = "What colour is the shape?"
IMAGE_SIZE = 56
N_TRAIN, N_TEST = 512, 64
TEACHER_CORRECT = 0.35
TEACHER_NEXT = 0.5
SFT_STEPS = 320
#: the warm start's first steps learn from the right answers only (to see colours), the rest from the teacher
SEE_FRACTION = 0.4
SFT_BATCH = 32
SFT_LR = 3e-3
SEED = 2468
#: the shipped warm-started model (package data, :func:`~rlcore_plugin_tasks.warm_start.shipped_model_dir`)
BASE_MODEL = "shapes-vl-base"
#: the model's maximum sequence length
MAX_POSITIONS = 128


#: the model's shape (the vision tower has ``vision_depth`` blocks)
class ModelShape(TypedDict):
    """The tiny VLM's size: :func:`rlcore_testkit.tiny_vlm.build_vl_model`'s keywords."""

    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    vision_depth: int


MODEL_SHAPE: ModelShape = {
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_layers": 2,
    "num_heads": 4,
    "num_kv_heads": 2,
    "vision_depth": 2,
}

_FIRST_WORD = re.compile(r"[a-z]+")


def score(data_source: str, solution_str: str, ground_truth: Any, extra_info: Any = None) -> float:
    """1.0 when the first word of the response (lower case) is ``ground_truth``, else 0.0."""
    match = _FIRST_WORD.search(solution_str.lower())
    return 1.0 if match is not None and match.group() == ground_truth_as_text(ground_truth).strip().lower() else 0.0


def cache_dir() -> Path:
    """Where the task's data and warm-started model live."""
    return _arith_cache_dir().parent / f"shapes-vl-{TASK_VERSION}"


def draw(colour: str, shape: str, rng: random.Random) -> Any:
    """A 56x56 RGB picture of one ``shape`` in ``colour`` (slightly jittered) at a random place and size."""
    from PIL import Image, ImageDraw

    image = Image.new("RGB", (IMAGE_SIZE, IMAGE_SIZE), (245, 245, 245))
    size = rng.randint(16, 36)
    x, y = rng.randint(2, IMAGE_SIZE - size - 2), rng.randint(2, IMAGE_SIZE - size - 2)
    fill = tuple(max(0, min(255, value + rng.randint(-20, 20))) for value in COLOURS[colour])
    pen = ImageDraw.Draw(image)
    if shape == "square":
        pen.rectangle((x, y, x + size, y + size), fill=fill)
    elif shape == "disc":
        pen.ellipse((x, y, x + size, y + size), fill=fill)
    else:
        pen.polygon([(x, y + size), (x + size, y + size), (x + size // 2, y)], fill=fill)
    return image


def png_bytes(image: Any) -> bytes:
    """``image`` encoded as PNG."""
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def _samples(count: int, seed: int) -> list[tuple[str, str, Any]]:
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        colour, shape = rng.choice(list(COLOURS)), rng.choice(SHAPES)
        out.append((colour, shape, draw(colour, shape, rng)))
    return out


def _row(colour: str, shape: str, image: Any, split: str, index: int) -> dict[str, Any]:
    return {
        "data_source": DATA_SOURCE,
        "prompt": [{"role": "user", "content": f"<image>{QUESTION}"}],
        "images": [{"bytes": png_bytes(image)}],
        "ability": "vision",
        "reward_model": {"style": "rule", "ground_truth": colour},
        "extra_info": {"split": split, "index": index, "shape": shape},
    }


def cpu_preset() -> dict[str, Any]:
    """The config fragment of the task (preset ``shapes-vl-cpu``)."""
    settings = {
        "data.image_key": "images",
        "data.max_prompt_length": 32,
        "data.max_response_length": 4,
        "actor_rollout_ref.model.use_remove_padding": True,
        "actor_rollout_ref.actor.ppo_mini_batch_size": 8,
        "actor_rollout_ref.actor.optim.lr": 3e-5,
        "trainer.total_training_steps": 30,
        "trainer.experiment_name": "shapes-vl-grpo",
    }
    return cpu_task_preset(cache_dir(), BASE_MODEL, settings)


def _teacher_answer(colour: str, rng: random.Random) -> str:
    names = list(COLOURS)
    u = rng.random()
    if u < TEACHER_CORRECT:
        return colour
    following = names[(names.index(colour) + 1) % len(names)]
    if u < TEACHER_CORRECT + TEACHER_NEXT:
        return following
    return rng.choice([name for name in names if name not in (colour, following)])


def base_tokenizer() -> Any:
    """The task's tokenizer (its vision tokens included), trained on the question, colours and shapes."""
    from rlcore_testkit.tiny_vlm import build_vl_tokenizer

    return build_vl_tokenizer([f"{QUESTION} {name} {shape}" for name in COLOURS for shape in SHAPES] * 20)


def build_base_model(
    model_dir: Path, *, steps: int = SFT_STEPS, samples: int = N_TRAIN, heartbeat: bool = True
) -> None:
    """Build the tiny Qwen2-VL and its processor, train it on the biased teacher and save both to ``model_dir``;
    ``heartbeat`` prints the progress.

    The first :data:`SEE_FRACTION` of the steps train on the right colours (the vision tower learns to see
    them), the rest on the biased teacher. All pictures have the same size, so every prompt renders to the
    same ids: a batch is the prompt ids
    repeated, each followed by its answer and the end-of-turn token (loss on those), with the pictures'
    pixels concatenated; transformers computes the mrope positions from ``mm_token_type_ids``.
    """
    import torch
    from rlcore_testkit.tiny_vlm import build_processor, build_vl_model, save_vlm

    from rlcore.api import token_types

    tokenizer = base_tokenizer()
    processor = build_processor(tokenizer)
    model = build_vl_model(tokenizer, **MODEL_SHAPE, max_position_embeddings=MAX_POSITIONS, seed=SEED)
    beat = Heartbeat(f"warm start of {BASE_MODEL}", steps) if heartbeat else None
    content = [{"type": "image"}, {"type": "text", "text": QUESTION}]
    text = processor.apply_chat_template(
        [{"role": "user", "content": content}], add_generation_prompt=True, tokenize=False
    )
    pictures = _samples(samples, SEED + 1)
    encoded = [processor(text=[text], images=[image], return_tensors="pt") for _, _, image in pictures]
    prompt = encoded[0]["input_ids"][0].tolist()
    answers = {
        name: tokenizer(name, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id] for name in COLOURS
    }
    rng = random.Random(SEED)
    optimizer = torch.optim.AdamW(model.parameters(), lr=SFT_LR, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / 25) * (1 - s / steps))
    torch.manual_seed(SEED)
    model.train()
    for step in range(steps):
        picks = [rng.randrange(len(pictures)) for _ in range(SFT_BATCH)]
        teach = step >= int(steps * SEE_FRACTION)
        replies = [answers[_teacher_answer(pictures[i][0], rng) if teach else pictures[i][0]] for i in picks]
        width = len(prompt) + max(len(reply) for reply in replies)
        ids = torch.full((SFT_BATCH, width), tokenizer.pad_token_id, dtype=torch.long)
        labels = torch.full((SFT_BATCH, width), -100, dtype=torch.long)
        mask = torch.zeros((SFT_BATCH, width), dtype=torch.long)
        for row, reply in enumerate(replies):
            end = len(prompt) + len(reply)
            ids[row, :end] = torch.tensor(prompt + reply)
            labels[row, len(prompt) : end] = torch.tensor(reply)
            mask[row, :end] = 1
        loss = model(
            input_ids=ids,
            attention_mask=mask,
            labels=labels,
            pixel_values=torch.cat([encoded[i]["pixel_values"] for i in picks]),
            image_grid_thw=torch.cat([encoded[i]["image_grid_thw"] for i in picks]),
            mm_token_type_ids=token_types(ids, model.config),
        ).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        if beat is not None:
            beat.step(step + 1, float(loss.detach()))
    model.eval()
    save_vlm(model, processor, model_dir)


def prepare_assets(config: Any = None) -> Path:
    """Write the task's parquet files if they are not cached yet; returns the cache folder."""
    return build_task_data(
        cache_dir(),
        lambda: [_row(*sample, "train", i) for i, sample in enumerate(_samples(N_TRAIN, SEED + 1))],
        lambda: [_row(*sample, "test", i) for i, sample in enumerate(_samples(N_TEST, SEED + 2))],
    )
