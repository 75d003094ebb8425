"""Build a wheelhouse from this checkout: one wheel of each distribution (rlcore and every ``plugins/<name>``),
built from clean copies of their sources (the checkout gets no ``build/`` or ``*.egg-info``), asking no index
for rlcore's own distributions.

    python tools/wheelhouse.py                    # every distribution, into ./wheelhouse
    python tools/wheelhouse.py --out DIR . plugins/backend_fsdp plugins/algo_grpo   # some of them

Then, on any machine with torch installed (README, "Installing the distributions"):

    pip install --find-links DIR rlcore-plugin-dapo

pip takes rlcore's distributions from DIR and everything else from its index. The wheels are built with the
setuptools of this Python when it is recent enough (``setuptools>=77``, what every pyproject.toml asks for),
otherwise pip fetches it into an isolated build environment for each project.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: what rlcore's own wheel is built from (the repository root holds the plugins and the tests too)
ROOT_SOURCES = ("pyproject.toml", "README.md", "LICENSE", "core")
#: never copied along with sources that are built
BUILD_JUNK = shutil.ignore_patterns("__pycache__", "*.egg-info", "build", "dist")
#: the setuptools major version every project's ``[build-system]`` requires (``setuptools>=77``)
SETUPTOOLS_MAJOR = 77


def distributions() -> list[Path]:
    """Every distribution's project folder: the repository root (rlcore), then each plugin, sorted."""
    return [ROOT, *sorted(path.parent for path in (ROOT / "plugins").glob("*/pyproject.toml"))]


def clean_copy(project: Path, dest: Path) -> Path:
    """A copy of ``project``'s sources under ``dest``, without build leftovers."""
    target = dest / ("rlcore" if project == ROOT else project.name)
    if project != ROOT:
        return Path(shutil.copytree(project, target, ignore=BUILD_JUNK))
    target.mkdir()
    for name in ROOT_SOURCES:
        if (project / name).is_dir():
            shutil.copytree(project / name, target / name, ignore=BUILD_JUNK)
        else:
            shutil.copy2(project / name, target / name)
    return target


def own_setuptools() -> bool:
    """Whether this Python's setuptools can build the projects (no isolated build environments needed)."""
    try:
        major = metadata.version("setuptools").split(".")[0]
    except metadata.PackageNotFoundError:
        return False
    return major.isdigit() and int(major) >= SETUPTOOLS_MAJOR


def build_wheelhouse(out: Path, projects: list[Path] | None = None) -> list[Path]:
    """Build one wheel of each of ``projects`` (default: :func:`distributions`) into ``out``; returns the wheels
    of ``out``. Raises :class:`subprocess.CalledProcessError` when pip fails (its output says why)."""
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="rlcore-wheelhouse-") as tmp:
        copies = [clean_copy(project.resolve(), Path(tmp)) for project in projects or distributions()]
        isolation = ["--no-build-isolation"] if own_setuptools() else []
        command = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", *isolation, "--wheel-dir", out]
        subprocess.run([*map(str, command), *map(str, copies)], check=True)
    return sorted(out.glob("*.whl"))


def main(argv: list[str] | None = None) -> None:
    """The command line: build the wheelhouse and list it."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("projects", nargs="*", type=Path, help="project folders (default: every distribution)")
    parser.add_argument("--out", type=Path, default=Path("wheelhouse"), help="the wheelhouse (default: ./wheelhouse)")
    args = parser.parse_args(argv)
    missing = [str(p) for p in args.projects if not (p / "pyproject.toml").is_file()]
    if missing:
        parser.error(f"not a project folder (no pyproject.toml): {', '.join(missing)}")
    try:
        wheels = build_wheelhouse(args.out, args.projects or None)
    except subprocess.CalledProcessError as exc:
        sys.exit(f"error: pip could not build the wheels (exit {exc.returncode}; its output is above)")
    for wheel in wheels:
        print(wheel)
    print(f"{len(wheels)} wheels in {args.out}: pip install --find-links {args.out} rlcore-plugin-<name>")


if __name__ == "__main__":
    main()
