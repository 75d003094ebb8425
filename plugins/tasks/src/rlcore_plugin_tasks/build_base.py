"""Build the bundled tasks' starting models, which ship with rlcore-plugin-tasks as package data.

The bundled tasks (presets ``arith-cpu``, ``arith-chain-cpu``, ``arith-tools-cpu``, ``shapes-vl-cpu``) start from small models
warm-started on a biased teacher. They are built here, with the plugin's own code (each task's
``build_base_model``), and committed under ``plugins/tasks/src/rlcore_plugin_tasks/data/<task>-base`` (a few MB each), so
that a run never builds them::

    python -m rlcore_plugin_tasks.build_base                    # every task, into the package's data folder
    python -m rlcore_plugin_tasks.build_base arith --out /tmp/x --steps 5

``--threads`` sets torch's intra-op threads, 1 by default: a model this small runs fastest on one (the
RL run of the arithmetic task took 36 s with one thread and 124 s with two on the same 2-core machine).
On a busy shared 2-core machine the builds took 18 (arith), 31 (arith-tools), 4.5 (shapes-vl) and 8
(arith-chain) minutes. ``plugins/tasks/tests/test_shipped_models.py`` checks that the shipped folders match
what this script builds (model shape, tokenizer) and that each build still runs. The builders come from rlcore's
test kit, the plugin's optional extra ``build`` (``pip install 'rlcore-plugin-tasks[build]'``).
"""

from __future__ import annotations

import argparse
import importlib
import shutil
import tempfile
import time
from pathlib import Path

from rlcore_plugin_tasks.warm_start import SHIPPED_DIR

#: task name -> the module that builds its starting model (``build_base_model``, ``BASE_MODEL``)
TASKS: dict[str, str] = {
    "arith": "rlcore_plugin_tasks.arith",
    "arith-chain": "rlcore_plugin_tasks.arith_chain",
    "arith-tools": "rlcore_plugin_tasks.arith_tools",
    "shapes-vl": "rlcore_plugin_tasks.shapes_vl",
}


def build(task: str, out_root: Path, steps: int | None = None) -> Path:
    """Build ``task``'s starting model into ``out_root/<BASE_MODEL>`` (replacing it only once the build is
    complete) and return that folder; ``steps`` overrides the task's warm-start steps (a quick check)."""
    module = importlib.import_module(TASKS[task])
    target = out_root / module.BASE_MODEL
    out_root.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=f".{module.BASE_MODEL}-", dir=out_root))
    try:
        if steps is None:
            module.build_base_model(partial)
        else:
            module.build_base_model(partial, steps=steps)
        for path in [partial, *partial.iterdir()]:  # readable by everyone, as package data is
            path.chmod(0o755 if path.is_dir() else 0o644)
        shutil.rmtree(target, ignore_errors=True)
        partial.rename(target)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return target


def main(argv: list[str] | None = None) -> None:
    """Command line: build the named tasks' models (all by default)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("tasks", nargs="*", help=f"tasks to build: {', '.join(TASKS)} (default: all)")
    parser.add_argument("--out", type=Path, default=SHIPPED_DIR, help="parent folder (default: the package's data)")
    parser.add_argument("--steps", type=int, default=None, help="warm-start steps (default: each task's own)")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1: fastest here)")
    args = parser.parse_args(argv)
    unknown = [task for task in args.tasks if task not in TASKS]
    if unknown:
        parser.error(f"unknown task(s) {', '.join(unknown)}; known: {', '.join(TASKS)}")
    try:
        import rlcore_testkit  # noqa: F401  (the models are built with its tiny-model builders)
    except ModuleNotFoundError as error:
        if error.name != "rlcore_testkit":
            raise
        parser.error("building a model needs rlcore's test kit: pip install 'rlcore-plugin-tasks[build]'")
    import os

    import torch

    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("DS_ACCELERATOR", "cpu")  # transformers' save imports DeepSpeed, which says so otherwise
    torch.set_num_threads(args.threads)
    for task in args.tasks or list(TASKS):
        start = time.perf_counter()
        path = build(task, args.out, args.steps)
        size = sum(f.stat().st_size for f in path.iterdir()) / 1e6
        print(f"{task}: {path} ({size:.1f} MB, {time.perf_counter() - start:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
