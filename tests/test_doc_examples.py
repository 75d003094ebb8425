"""The command examples of the README and ``docs/`` still print what the pages show.

An example is a fenced block right after an HTML comment ``<!-- example -->`` whose first line is
``$ COMMAND``; the other lines are what the command prints (standard output and error, in order). The test
runs the command in an empty folder with an empty cache (once per command and pytest run: pages showing the
same command, and ``test_default_run.py`` for the README's ``rlcore run``, share the run; see
``command_once`` in ``conftest.py``) and compares:

- numbers may differ (times, rewards, timestamps in paths): every run of digits matches any other, and
  every duration (``42s``, ``3m05s``) any other;
- a ``...`` line stands for any number of lines; without one at the end, the output must end there too.

The comment may name variables the command runs with (``<!-- example RLCORE_LOAD_PLUGINS=a,b -->``: the
install the page describes) and ``slow`` for a command that trains (marked ``slow``, as the other runs of
minutes are).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MARKER = re.compile(r"^<!-- example(?P<args>[^>]*)-->\s*$")
ANY_LINES = "..."


@dataclass
class Example:
    """One checked example: where it is, its command, what it prints and how to run it."""

    page: Path
    line: int
    command: str
    expected: list[str]
    env: dict[str, str] = field(default_factory=dict)
    slow: bool = False

    @property
    def id(self) -> str:
        """``page:line`` (the test's id)."""
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def find_examples(page: Path) -> list[Example]:
    """The marked examples of ``page``; a marker not followed by a fenced ``$ command`` block is an error."""
    lines = page.read_text(encoding="utf-8").splitlines()
    examples = []
    for index, text in enumerate(lines):
        marker = MARKER.match(text)
        if not marker:
            continue
        where = f"{page.relative_to(ROOT)}:{index + 1}"
        assert index + 2 < len(lines) and lines[index + 1].startswith("```"), f"{where}: no fenced block after it"
        end = next((j for j in range(index + 2, len(lines)) if lines[j].startswith("```")), None)
        assert end is not None, f"{where}: the fenced block is not closed"
        block = lines[index + 2 : end]
        assert block and block[0].startswith("$ "), f"{where}: the block must start with '$ COMMAND'"
        words = marker["args"].split()
        env = dict(word.split("=", 1) for word in words if "=" in word)
        examples.append(Example(page, index + 3, block[0][2:], block[1:], env, "slow" in words))
    return examples


EXAMPLES = [example for page in PAGES for example in find_examples(page)]


def normalise(line: str) -> str:
    """The line with every duration (``42s``, ``3m05s``, ``1h02m``) as ``T``, every other run of digits as ``#``
    and trailing spaces dropped."""
    return re.sub(r"\d+", "#", re.sub(r"\b\d+(?:h\d+m|m\d+s|s)\b", "T", line)).rstrip()


def mismatch(expected: list[str], actual: list[str]) -> str | None:
    """Why ``actual`` does not match ``expected`` (with ``...`` lines and numbers as wildcards), or None."""
    segments: list[list[str]] = [[]]
    for line in expected:
        if line.strip() == ANY_LINES:
            segments.append([])
        else:
            segments[-1].append(normalise(line))
    output = [normalise(line) for line in actual]
    position = 0
    for number, segment in enumerate(segments):
        if not segment:
            continue
        if number == 0:
            starts = [0]
        else:
            starts = [i for i in range(position, len(output) - len(segment) + 1)]
        found = next((i for i in starts if output[i : i + len(segment)] == segment), None)
        if found is None:
            where = output[position : position + len(segment) + 3]
            return (
                f"expected, from output line {position + 1}:\n  "
                + "\n  ".join(segment)
                + "\ngot:\n  "
                + "\n  ".join(where)
            )
        position = found + len(segment)
    if segments[-1] and position != len(output):
        return "the output goes on after the example's last line:\n  " + "\n  ".join(output[position : position + 5])
    return None


def test_every_page_has_its_examples_found() -> None:
    """The pages whose examples are checked (a renamed marker would silently check nothing)."""
    pages = {example.page.name for example in EXAMPLES}
    assert {"README.md", "running.md", "sft.md"} <= pages, pages


def test_the_matcher() -> None:
    """Numbers match any numbers, ``...`` any lines, and the output must not go on after a closed example."""
    assert mismatch(["wall time: 97.0 s", "..."], ["wall time: 12.5 s", "more"]) is None
    assert mismatch(["step 1/40, elapsed 31s, ETA 20m15s"], ["step 1/40, elapsed 5s, ETA 58s"]) is None
    assert mismatch(["a", "...", "z 1"], ["a", "b", "c", "z 22"]) is None
    assert mismatch(["a", "b"], ["a", "b", "c"]) is not None
    assert mismatch(["b"], ["a", "b"]) is not None  # the first lines are the first lines


@pytest.mark.parametrize(
    "example",
    [pytest.param(e, id=e.id, marks=[pytest.mark.slow] if e.slow else []) for e in EXAMPLES],
)
def test_example_prints_what_the_page_shows(example: Example, command_once: Any) -> None:
    """The command, run once per pytest run however many pages show it (``command_once``: an empty folder, an
    empty cache), prints what the page shows."""
    ran = command_once(example.command, example.env)
    problem = mismatch(example.expected, ran.output.splitlines())
    assert problem is None, f"{example.id}: `{example.command}` (exit {ran.returncode}): {problem}"
