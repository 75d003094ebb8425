#!/usr/bin/env bash
# Build the folder that `python bench/gpu.py --wheels DIR` installs on a GPU machine without a package index
# (bench/README.md, "bench/gpu.py"): wheels of rlcore and of the plugins the benchmark's runs use (FSDP, GRPO),
# built from a copy of this checkout (FSDP, GRPO and Megatron); omegaconf's wheel (pure Python, not installed there)
# and megatron-core's for the GPU machine's Python ($GPU_PYTHON, default 3.12), downloaded once here; and
# commit.txt, the commit they were built from (the device machine's copy has no .git).
#
#   bench/gpu_wheels.sh [DIR]        # default: .gpu at the repository root (ignored by git)
#
# Then carry DIR with the working tree (the device tool's `carry`; at most 64 MiB) and run
#   python3 bench/gpu.py --device cuda --size 1.7b --wheels .gpu --out-dir "$OUT"
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$repo/.gpu}
python=${PYTHON:-python}
omegaconf=$("$python" -c "import importlib.metadata as m; print(m.version('omegaconf'))")

rm -rf "$out/whl"
mkdir -p "$out/whl"
src=$(mktemp -d)
trap 'rm -rf "$src"' EXIT
cp -r "$repo/pyproject.toml" "$repo/README.md" "$repo/LICENSE" "$repo/core" "$src/"
mkdir "$src/plugins"
plugins="backend_fsdp algo_grpo backend_megatron"
for plugin in $plugins; do
    cp -r "$repo/plugins/$plugin" "$src/plugins/$plugin"
done
find "$src" \( -name __pycache__ -o -name '*.egg-info' -o -name build -o -name dist \) -prune -exec rm -rf {} +
"$python" -m pip wheel -q --no-deps --no-build-isolation -w "$out/whl" "$src" $(printf "$src/plugins/%s " $plugins)
"$python" -m pip download -q --no-deps --only-binary=:all: -d "$out/whl" "omegaconf==$omegaconf"
mcore=$("$python" -c "import importlib.metadata as m; print(m.version('megatron-core'))")
gpu_python=${GPU_PYTHON:-3.12}
"$python" -m pip download -q --no-deps --only-binary=:all: --python-version "$gpu_python" --implementation cp \
    --platform manylinux_2_28_x86_64 -d "$out/whl" "megatron-core==$mcore"

commit=$(git -C "$repo" rev-parse HEAD 2>/dev/null || echo unknown)
if [ -n "$(git -C "$repo" status --porcelain --untracked-files=no 2>/dev/null)" ]; then
    commit="$commit+dirty"
fi
echo "$commit" > "$out/commit.txt"
ls -1 "$out/whl"
du -sh "$out"
