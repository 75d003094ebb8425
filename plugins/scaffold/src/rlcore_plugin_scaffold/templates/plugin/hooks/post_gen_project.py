"""Remove the module and the test of every component kind that was not chosen, and any ``__pycache__``.

Each kind ``K`` has ``src/<package>/K.py`` and ``tests/test_K.py`` in the template; cookiecutter renders
all of them, and this script (run in the generated project's directory) deletes the unchosen ones.
``__pycache__`` folders come along when the template is installed package data that pip byte-compiled.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

CONTEXT: dict = json.loads({{ cookiecutter | tojson | tojson }})


def main() -> None:
    """Delete the files of the kinds whose switch is off, and byte-code copied from the template."""
    for cache in list(Path().rglob("__pycache__")):
        shutil.rmtree(cache)
    package = Path("src") / f"rlcore_plugin_{CONTEXT['underscored']}"
    for kind in CONTEXT["_kinds"]:
        if not CONTEXT[kind]:
            (package / f"{kind}.py").unlink()
            (Path("tests") / f"test_{kind}.py").unlink()


if __name__ == "__main__":
    main()
