#!/usr/bin/env bash
# Build the folder that `python bench/gpu.py --wheels DIR` installs on a GPU machine without a package index
# (bench/README.md, "bench/gpu.py"):
# - wheels of rlcore and of the plugins the benchmark's runs use (FSDP, the HF rollout engine, GRPO, Megatron, the
#   bundled tasks, multi-turn rollouts, the report and the run-health monitors that rlcore[train] brings, the planner behind `rlcore plan`, the profiler, and the
#   test kit, whose seed command and tiny model the benchmark uses), built by tools/wheelhouse.py from clean
#   copies of this checkout;
# - the wheels of the dependencies an environment holding only torch and transformers lacks (omegaconf, pluggy,
#   psutil, and pytest with iniconfig for the test kit) and megatron-core's, for the GPU machine's Python
#   ($GPU_PYTHON, default 3.12), downloaded once here. pyarrow (55 MB, more than may travel beside the rest) is
#   the one dependency the machine must have already (the lent GPU machines do); the report's matplotlib is not
#   needed (without it a run's summary says the report was not written);
# - commit.txt, the commit they were built from (the device machine's copy has no .git).
#
#   bench/gpu_wheels.sh [DIR]        # default: .gpu at the repository root (ignored by git)
#
# Then carry DIR with the working tree (the device tool's `carry`; at most 64 MiB) and run
#   python3 bench/gpu.py --device cuda --size 1.7b --wheels .gpu --out-dir "$OUT"
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$repo/.gpu}
python=${PYTHON:-python}
pinned() {  # NAME==VERSION of each installed distribution named
    "$python" -c "import importlib.metadata as m, sys; print(' '.join(f'{n}=={m.version(n)}' for n in sys.argv[1:]))" "$@"
}

rm -rf "$out/whl"
plugins="backend_fsdp rollout_hf algo_grpo backend_megatron tasks agents report health plan testkit profiler"
"$python" "$repo/tools/wheelhouse.py" --out "$out/whl" "$repo" $(printf "$repo/plugins/%s " $plugins) > /dev/null
gpu_python=${GPU_PYTHON:-3.12}
"$python" -m pip download -q --no-deps --only-binary=:all: --python-version "$gpu_python" --implementation cp \
    --platform manylinux_2_28_x86_64 -d "$out/whl" $(pinned omegaconf pluggy psutil pytest iniconfig megatron-core)

commit=$(git -C "$repo" rev-parse HEAD 2>/dev/null || echo unknown)
if [ -n "$(git -C "$repo" status --porcelain --untracked-files=no 2>/dev/null)" ]; then
    commit="$commit+dirty"
fi
echo "$commit" > "$out/commit.txt"
ls -1 "$out/whl"
du -sh "$out"
# the device tool carries at most 64 MiB with the working tree
if [ "$(du -sk "$out" | cut -f1)" -gt $((64 * 1024)) ]; then
    echo "error: $out is over the 64 MiB that may travel with the working tree" >&2
    exit 1
fi
