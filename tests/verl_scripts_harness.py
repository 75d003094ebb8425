"""Runs verl's example scripts far enough to record their command lines, for ``rlcore run --dry-run``.

Shared by the tests of each verl version's sample (``tests/test_verl_scripts.py`` for 0.9,
``tests/test_verl010_scripts.py`` for 0.10). A script is executed by bash with ``python3`` replaced by a
function that records the arguments of its ``python3 -m verl.trainer.main_ppo`` line (reached directly, through
``ray job submit ... --`` or through ``uv run ... python3``); :func:`localised` then points its model, data and
reward-file paths at tiny local files and appends ``trainer.device=cpu``, the only changes a user would make.
The variables some scripts demand of their user (``set -u``, ``${VAR:?}``) are set as a user would set them
(:data:`USER_VARIABLES`).
"""

from __future__ import annotations

import io
import os
import re
import subprocess
from pathlib import Path

import pytest
from rlcore_testkit.runs import make_tiny_task

#: stands in for ``python3``/``python`` (records main_ppo's arguments), ``ray job submit ... --``, ``uv run ...
#: python3`` (verl 0.10's launcher; the script still passes ``runtime_env.py_executable`` as it would),
#: ``nvidia-smi``, ``hf download`` (no network here: the data and model paths are pointed at local files anyway) and
#: ``ulimit`` (raising the open-files limit is not permitted in a sandbox)
SHIMS = r"""
python3() {
    if [ "$1" = "-m" ] && [ "${2#verl.trainer.main_ppo}" != "$2" ]; then shift 2; printf '%s\0' "$@" > "$VERL_ARGV"
    elif [ "$1" = "-c" ]; then return 1  # an import probe (python3 -c 'import torch_npu'): not installed
    else echo "{}"; fi
}
python() { python3 "$@"; }
ray() { while [ $# -gt 0 ] && [ "$1" != "--" ]; do shift; done; shift; "$@"; }
uv() { while [ $# -gt 0 ] && [ "$1" != "python3" ] && [ "$1" != "python" ]; do shift; done; "$@"; }
nvidia-smi() { echo 8; }
hf() { :; }
ulimit() { :; }
export -f python3 python ray uv nvidia-smi hf ulimit
bash "$1"
"""
#: the variables a user must set before some of verl's scripts run (each fails under ``set -u`` or ``${VAR:?}``, or
#: passes an empty path, without it), as the harness sets them: ``{home}`` is the script's working folder. The model
#: and adapter paths they lead to are pointed at the tiny model and adapter by :func:`localised`, as any model path.
USER_VARIABLES = {
    # verl 0.10's run_deepseek_v4_flash_megatron.sh and run_deepseek_v4_veomni.sh: $HDFS_ROOT/model/... (the model)
    "HDFS_ROOT": "{home}/hdfs",
    # the same two scripts: $DATA_ROOT/dataset/... (the data) and $DATA_ROOT/checkpoint/... (the checkpoints)
    "DATA_ROOT": "{home}/data",
    # run_qwen3_vl_30b_a3b_fsdp.sh names it in EXPERIMENT_NAME before it defaults it to vllm (every script's default)
    "INFER_BACKEND": "vllm",
    # tuning/lora/run_qwen3_8b_from_adapter_fsdp.sh (${LORA_ADAPTER_PATH:?}): the LoRA adapter to resume from
    "LORA_ADAPTER_PATH": "{home}/lora_adapter",
    # run_nemotron_nano_v3_30b_a3b_megatron.sh: the models/data/ckpts root (the other scripts default it to this)
    "RAY_DATA_HOME": "{home}/verl",
    # run_kimi_k2_6_glm5_1_megatron_lite.sh (${MODEL_PATH:?}, defaulted from it for its default MODEL_VARIANT)
    "KIMI_K2_6_MODEL_PATH": "{home}/models/Kimi-K2.6",
    # the Moonlight GRPO script (and 0.9's Qwen2.5-VL Megatron one): megatron.dist_checkpointing_path, a
    # megatron-core distributed checkpoint the user converted; :func:`localised` points it at a real one
    "DIST_CKPT_PATH": "{home}/mcore_ckpt",
}
#: the key naming the LoRA adapter a run resumes from
ADAPTER_KEY = "actor_rollout_ref.model.lora_adapter_path"
#: the keys naming a model directory: the actor's, critic's and reward model's (verl 0.9 and 0.10 spellings) and
#: each distillation teacher's
MODEL_KEY = re.compile(
    r"(actor_rollout_ref|critic|reward_model)\.model\.path"
    r"|reward\.reward_model\.model_path"
    r"|distillation\.teacher_models\.[^.=]+\.model_path"
)
#: the keys naming a megatron-core distributed checkpoint to start from (verl's Megatron roles)
DIST_CHECKPOINT_KEY = re.compile(r"(actor_rollout_ref\.(actor|ref)|critic)\.megatron\.dist_checkpointing_path")
DATA_KEYS = ("data.train_files", "data.val_files")
#: the key naming a reward-function file (verl 0.9 and 0.10 spellings): a file of the user's, like the data
REWARD_FILE_KEY = re.compile(r"(reward\.)?custom_reward_function\.path")
#: the user's reward file that stands in for one a script names: ``compute_score`` with the GDPO script's reward
#: components (its own file is ``verl/utils/reward_score/rlla.py`` of verl's repository, not part of the sample)
REWARD_FILE = """
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    accuracy = float(solution_str.strip().endswith(str(ground_truth)))
    formatted = float("####" in solution_str)
    return {"score": accuracy + formatted, "accuracy_reward": accuracy, "format_reward": formatted}
"""


#: :data:`SHIMS` recording the arguments of verl's one-step-off and fully-async mains as well
#: (``python3 -m verl.experimental.<trainer>.<...main...>``)
EXPERIMENTAL_SHIMS = SHIMS.replace(
    '[ "${2#verl.trainer.main_ppo}" != "$2" ]',
    '{ [ "${2#verl.trainer.main_ppo}" != "$2" ] || [ "${2#verl.experimental.}" != "$2" ]; }',
)


def verl_arguments(examples: Path, script: str, home: Path, shims: str = SHIMS) -> list[str]:
    """The arguments ``examples/script`` passes to ``python3 -m verl.trainer.main_ppo`` (the mains ``shims``
    records), run in ``home`` (a script may write files into its working directory: gpt-oss writes get_model.py)
    with :data:`USER_VARIABLES` set."""
    argv = home / "argv"
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "VERL_ARGV": str(argv)}
    env.update({name: value.format(home=home) for name, value in USER_VARIABLES.items()})
    subprocess.run(
        ["bash", "-c", shims, "shim", str(examples / script)],
        cwd=home,
        env=env,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert argv.is_file(), f"{script} did not reach python3 -m verl.trainer.main_ppo"
    return [word for word in argv.read_bytes().decode().split("\0") if word]


def localised(
    arguments: list[str],
    model: Path,
    task: dict[str, Path],
    adapter: Path | None = None,
    dist_checkpoint: Path | None = None,
) -> list[str]:
    """``arguments`` with the model, data, reward-file, (given ``adapter``, a LoRA adapter of ``model``) adapter and
    (given ``dist_checkpoint``, a megatron-core distributed checkpoint of ``model``) checkpoint paths pointed at local
    files, and ``trainer.device=cpu``."""
    out = []
    for word in arguments:
        key = word.split("=", 1)[0].lstrip("+")
        if MODEL_KEY.fullmatch(key):
            word = f"{word.split('=', 1)[0]}={model}"  # keeps the '+' of a key the script adds
        elif key == ADAPTER_KEY and adapter is not None:
            word = f"{word.split('=', 1)[0]}={adapter}"
        elif DIST_CHECKPOINT_KEY.fullmatch(key) and dist_checkpoint is not None:
            word = f"{word.split('=', 1)[0]}={dist_checkpoint}"
        elif key in DATA_KEYS:
            word = f"{key}={task['train' if key == 'data.train_files' else 'test']}"
        elif REWARD_FILE_KEY.fullmatch(key) and "reward" in task:
            word = f"{word.split('=', 1)[0]}={task['reward']}"
        out.append(word)
    return [*out, "trainer.device=cpu"]


def data_parallel_line(arguments: list[str]) -> str:
    """The run plan's data-parallel line for a Megatron script: world = GPUs per node × nodes, split into
    world ÷ (the actor's tensor × pipeline × context parallel size) data-parallel ranks (the sizes of its
    ``megatron`` section, or of Megatron-Lite's ``engine``)."""
    values = dict(word.lstrip("+").split("=", 1) for word in arguments if "=" in word)
    world = int(values.get("trainer.n_gpus_per_node", 1)) * int(values.get("trainer.nnodes", 1))
    model_parallel = 1
    sizes = {"tensor_model_parallel_size": "tp", "pipeline_model_parallel_size": "pp", "context_parallel_size": "cp"}
    for size, lite in sizes.items():
        given = values.get(
            f"actor_rollout_ref.actor.megatron.{size}", values.get(f"actor_rollout_ref.actor.engine.{lite}")
        )
        model_parallel *= int(given or 1)
    return f"data-parallel ranks: {world // model_parallel} (of {world} ranks)"


@pytest.fixture(scope="module", name="tiny_task")
def tiny_task_fixture(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A tiny parquet task shared by every script, with a reward file (:data:`REWARD_FILE`)."""
    folder = tmp_path_factory.mktemp("task")
    reward = folder / "reward.py"
    reward.write_text(REWARD_FILE)
    return {**make_tiny_task(folder), "reward": reward}


@pytest.fixture(scope="module", name="tiny_lora_adapter")
def tiny_lora_adapter_fixture(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A LoRA adapter of the tiny model (``make_tiny_lora_adapter``), for the scripts that resume from one."""
    from rlcore_testkit.tiny import make_tiny_lora_adapter

    return make_tiny_lora_adapter(tiny_model_dir, tmp_path_factory.mktemp("lora") / "adapter")


@pytest.fixture(scope="module", name="tiny_vlm_dir")
def tiny_vlm_dir_fixture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny Qwen2.5-VL model with its processor, for the VLM scripts."""
    from rlcore_testkit.tiny_vlm import build_tiny_vlm

    return build_tiny_vlm(tmp_path_factory.mktemp("vlm"), arch="qwen2_5_vl")


@pytest.fixture(scope="module", name="tiny_moe_dir")
def tiny_moe_dir_fixture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Qwen3-MoE (``make_tiny_moe_model_dir``), for the mixture-of-experts scripts."""
    from rlcore_testkit.tiny import make_tiny_moe_model_dir

    return make_tiny_moe_model_dir(tmp_path_factory.mktemp("moe"))


def write_dist_checkpoint(model_dir: Path, directory: Path) -> Path:
    """A megatron-core distributed checkpoint of the model at ``model_dir`` in ``directory``, written by rlcore's
    Megatron engine on one rank (``rlcore_plugin_megatron.dist_checkpoint``, the ``torch_dist`` format verl's
    converter writes)."""
    from rlcore_plugin_megatron.dist_checkpoint import save_dist_checkpoint
    from rlcore_testkit.contracts.backend import TrainingBackendContract

    class Megatron(TrainingBackendContract):
        component_name = "megatron"

    worker = Megatron.make_actor(model_dir, "actor")
    try:
        save_dist_checkpoint(worker.actor.chunks, directory)
    finally:
        worker.shutdown()
    return directory


@pytest.fixture(scope="module", name="tiny_moe_dist_checkpoint")
def tiny_moe_dist_checkpoint_fixture(tiny_moe_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny Qwen3-MoE as a megatron-core distributed checkpoint, for the scripts that start from one
    (``$DIST_CKPT_PATH``)."""
    return write_dist_checkpoint(tiny_moe_dir, tmp_path_factory.mktemp("dist_ckpt") / "mcore")


@pytest.fixture(scope="module", name="tiny_vl_task")
def tiny_vl_task_fixture(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A geo3k-style image task (train/test parquet with an ``images`` column) for the VLM scripts, with a reward
    file (:data:`REWARD_FILE`) for those that name one of verl's (the Qwen3.5-2B image and video scripts)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from PIL import Image

    folder = tmp_path_factory.mktemp("vl_task")
    buffer = io.BytesIO()
    Image.new("RGB", (56, 56), "red").save(buffer, format="PNG")
    row = {
        "data_source": "hiyouga/geometry3k",
        "prompt": [{"role": "user", "content": "<image>What colour is the square?"}],
        "images": [{"bytes": buffer.getvalue(), "path": None}],
        "reward_model": {"style": "rule", "ground_truth": "red"},
    }
    paths = {split: folder / f"{split}.parquet" for split in ("train", "test")}
    for path in paths.values():
        pq.write_table(pa.Table.from_pylist([row] * 4), path)
    reward = folder / "reward.py"
    reward.write_text(REWARD_FILE)
    return {**paths, "reward": reward}
