#!/usr/bin/env bash
# Mixture-of-experts on one GPU, in one command (the device machine has no package index): installs the wheels
# of bench/gpu_wheels.sh, then writes into OUT (default: ./gpu-moe-out)
#   moe_replay_fsdp.json      bench/moe_replay.py --size 300m: replay off against R3 on the FSDP engine, bf16
#   moe_replay_megatron.json  the same on the Megatron engine (tiny model: megatron-core's MoE layers on CUDA)
#   rollout_moe.json          bench/rollout_moe.py: MoE sampling speed with and without recording the routing,
#                             and the recording's agreement with a teacher-forced forward in fp32 and bf16
# each with its log (*.err). Every part has its own time limit, so one slow part cannot eat the others.
#
#   bench/gpu_wheels.sh && bash bench/gpu_moe.sh "$OUT"     # carry .gpu with the working tree
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$repo/gpu-moe-out}
mkdir -p "$out"
cd "$repo"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/rlcore-site .gpu/whl/*.whl
export PYTHONPATH=/tmp/rlcore-site HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONWARNINGS=ignore
cat .gpu/commit.txt > "$out/commit.txt"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$out/gpu.txt" 2>&1
python3 -c "import torch, transformers; print(torch.__version__, transformers.__version__)" >> "$out/gpu.txt" 2>&1
part() {  # part NAME LIMIT_S COMMAND...: run COMMAND under a limit, stdout to NAME.json, stderr to NAME.err
    local name=$1 limit=$2
    shift 2
    local start=$SECONDS
    timeout "$limit" "$@" > "$out/$name.json" 2> "$out/$name.err"
    echo "$name: exit $? in $((SECONDS - start)) s" | tee -a "$out/parts.txt"
}
part moe_replay_fsdp "${FSDP_LIMIT:-240}" python3 bench/moe_replay.py --size 300m --device cuda --steps 2 --threads 0
part moe_replay_megatron "${MEGATRON_LIMIT:-120}" \
    python3 bench/moe_replay.py --size tiny --device cuda --steps 1 --strategy megatron --threads 0
part rollout_moe "${ROLLOUT_LIMIT:-90}" python3 bench/rollout_moe.py --device cuda --batches 8,64 --new-tokens 64
