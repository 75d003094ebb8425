"""Code scorer: run the model's program on a problem's test cases in the core sandbox; the score is the
fraction of tests passed (data sources ``codecontests``, ``apps``, ``codeforces``, ``taco``, as in verl).

The ground truth is a JSON string (or a dict) in the TACO/APPS layout::

    {"inputs": ["1 2\\n", ...], "outputs": ["3\\n", ...]}            # standard input -> standard output
    {"fn_name": "add", "inputs": [[1, 2], ...], "outputs": [3, ...]}  # call-based: fn(*args) == output

optionally with ``"time_limit"`` (seconds of CPU time per test; wall time is twice that) and
``"memory_limit"`` (MB). The program is the last fenced code block of the response (```` ```python ````
preferred), else the whole response. Each test runs in :func:`rlcore_plugin_sandbox.run_python`, confined by the
kernel (its own namespaces, a read-only view of the interpreter, a private folder, no network, no
privileges) with CPU-time, wall-time, memory, process and output limits; on a host that cannot confine it
fully, scoring raises :class:`rlcore_plugin_sandbox.SandboxUnavailableError` unless
``reward_model.sandbox.allow_unconfined=true`` (which a run passes on as ``RLCORE_SANDBOX_ALLOW_UNCONFINED``).
A test passes when the program exits normally and its output
equals the expected output (compared line by line, ignoring trailing whitespace; call-based: equal as JSON
values); stdout past :data:`OUTPUT_LIMIT_BYTES` fails it, stderr past it does not (the sample's
``stderr_overflow`` counts such tests). A test input with a lone surrogate (``"\\ud800"``, text without a
UTF-8 form) is bad data: an :class:`RLCoreError` naming the data source, the sample and the test. After the first test that runs out of time or memory, the remaining tests are counted as failed
without running, so a hanging program costs one wall-time limit per sample. Samples are scored concurrently
by the reward manager's scorer processes (``reward_model.scorer_workers``), which bounds how many programs
run at once; ``reward_model.scorer_timeout`` must exceed the limits of one test.

With ``reward_model.sandbox_fusion.url`` set, each test runs on that Sandbox Fusion service instead
(:mod:`rlcore_plugin_sandbox.fusion`): the same program, input, time limit and judgement, the memory limit
``reward_model.sandbox_fusion.memory_limit_mb`` when the problem gives none. A service that fails a request
after its retries scores the sample 0 with ``status="sandbox_fusion_error"`` and the reason in the extra value
``sandbox_error`` (the run goes on).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from rlcore.api import RLCoreError

#: the limits of one test when the problem gives none (seconds of CPU time, MB of memory)
DEFAULT_TIME_LIMIT_S = 5.0
DEFAULT_MEMORY_LIMIT_MB = 512
#: output the sandbox keeps of one test (bytes, stdout and stderr each); longer stdout fails the test, longer
#: stderr is only counted (``stderr_overflow``)
OUTPUT_LIMIT_BYTES = 1 << 16
#: the most test cases run per sample (long test lists are cut, as verl's sandbox rewards do)
MAX_TESTS = 64
_FENCE = re.compile(r"```([A-Za-z0-9_+-]*)[ \t]*\n(.*?)```", re.DOTALL)
_CALL_HARNESS = """
import json as _json, sys as _sys
_args = _json.loads(_sys.stdin.read())
_result = {fn}(*_args)
print(_json.dumps(_result))
"""


def extract_program(solution_str: str) -> str:
    """The last ```` ```python ```` block of the response, else its last fenced block, else all of it."""
    blocks = _FENCE.findall(solution_str)
    python = [code for lang, code in blocks if lang.lower() in ("python", "python3", "py")]
    if python:
        return python[-1]
    return blocks[-1][1] if blocks else solution_str


def parse_tests(ground_truth: Any) -> dict[str, Any]:
    """The test cases of a ground truth (JSON string or dict); a malformed one is an :class:`RLCoreError`
    (bad data, not a bad response)."""
    try:
        tests = json.loads(ground_truth) if isinstance(ground_truth, (str, bytes)) else ground_truth
    except json.JSONDecodeError as exc:
        raise RLCoreError(f"code scorer: the ground truth is not JSON ({exc}): {str(ground_truth)[:120]!r}") from exc
    if not isinstance(tests, Mapping) or not isinstance(tests.get("inputs"), list):
        raise RLCoreError(
            "code scorer: the ground truth needs {'inputs': [...], 'outputs': [...]} (optionally 'fn_name'), "
            f"got {str(ground_truth)[:120]!r}"
        )
    outputs = tests.get("outputs")
    if not isinstance(outputs, list) or len(outputs) != len(tests["inputs"]):
        raise RLCoreError("code scorer: the ground truth's 'outputs' must be a list as long as its 'inputs'")
    return dict(tests)


def _same_output(actual: str, expected: Any) -> bool:
    """Line-by-line equality ignoring trailing whitespace and trailing blank lines."""
    if isinstance(expected, list):
        expected = "\n".join(str(line) for line in expected)

    def lines(text: str) -> list[str]:
        return [line.rstrip() for line in str(text).rstrip().splitlines()]

    return lines(actual) == lines(expected)


def _same_value(actual: str, expected: Any) -> bool:
    """A call-based result (printed as JSON) equals the expected value; tuples compare as lists."""
    try:
        return json.loads(actual) == json.loads(json.dumps(expected))
    except (json.JSONDecodeError, TypeError):
        return False


def _sample(extra_info: Any) -> str:
    """How an error names the sample: its ``extra_info["index"]`` where it has one."""
    index = extra_info.get("index") if isinstance(extra_info, Mapping) else None
    return "" if index is None else f", sample {index}"


def score(data_source: str, solution_str: str, ground_truth: Any, extra_info: Any = None) -> dict[str, Any]:
    """The fraction of the problem's tests the response's program passes, with ``passed``, ``tests``,
    ``status`` (the first failing test's sandbox status, or ``ok``) and ``stderr_overflow`` (how many tests
    wrote more than :data:`OUTPUT_LIMIT_BYTES` to stderr, which does not fail them) as extra information
    (and ``sandbox_error`` when a Sandbox Fusion service failed).
    A test input that is not valid text (a lone surrogate) is an :class:`RLCoreError` naming the test."""
    from rlcore_plugin_sandbox import SandboxLimits, run_python
    from rlcore_plugin_sandbox.fusion import FusionUnavailable, run_python_remote, settings_from_env

    tests = parse_tests(ground_truth)
    remote = settings_from_env()
    cpu = float(tests.get("time_limit") or DEFAULT_TIME_LIMIT_S)
    limits = SandboxLimits(
        cpu_seconds=cpu,
        wall_seconds=2 * cpu,
        memory_mb=int(tests.get("memory_limit") or (remote.memory_limit_mb if remote else DEFAULT_MEMORY_LIMIT_MB)),
        output_bytes=OUTPUT_LIMIT_BYTES,
    )
    program = extract_program(solution_str)
    fn_name = tests.get("fn_name")
    if fn_name:
        program += _CALL_HARNESS.format(fn=fn_name)
    cases = list(zip(tests["inputs"], tests["outputs"]))[:MAX_TESTS]
    passed = stderr_overflow = 0
    status = "ok"
    for number, (stdin, expected) in enumerate(cases):
        text = json.dumps(stdin) if fn_name else str(stdin)
        try:
            if remote is None:
                result = run_python(program, stdin=text, limits=limits)
            else:
                result = run_python_remote(remote, program, text, limits)
        except ValueError as exc:  # SandboxInputError: the input has no UTF-8 form
            raise RLCoreError(f"code scorer ({data_source}{_sample(extra_info)}): test {number}: {exc}") from None
        except FusionUnavailable as exc:
            return {
                "score": 0.0,
                "passed": 0,
                "tests": len(cases),
                "status": "sandbox_fusion_error",
                "stderr_overflow": stderr_overflow,
                "sandbox_error": f"test {number}: {exc}",
            }
        stderr_overflow += "stderr" in result.truncated_streams
        same = _same_value if fn_name else _same_output
        if result.status == "ok" and "stdout" not in result.truncated_streams and same(result.stdout, expected):
            passed += 1
            continue
        status = status if status != "ok" else (result.status if result.status != "ok" else "wrong")
        if result.status in ("timeout", "memory"):
            break
    total = len(cases)
    return {
        "score": passed / total if total else 0.0,
        "passed": passed,
        "tests": total,
        "status": status,
        "stderr_overflow": stderr_overflow,
    }
