"""Scorers cannot hang a run: timeouts kill the scorer's process, samples are scored concurrently, a batch's
scoring has a bound, fail-fast stops at the first failure. Scorer processes are contained: each leads its own
process group, closing the pool (or the controller's exit) kills what a scorer started, and their output goes
through the pool, capped per batch, never straight to the run's stdout, so a leftover child cannot hold a
pipeline open. Every test runs real processes."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from rlcore_testkit.contracts.rewards import make_reward_batch

from rlcore.config.sections.reward_model import RewardModelConfig
from rlcore.reward import RewardError
from rlcore.reward.managers import BatchRewardManager, NaiveRewardManager
from rlcore.reward.pool import ScorerPool


def hang(data_source, solution_str, ground_truth, extra_info=None):
    """Never returns (sleeps)."""
    time.sleep(3600)


def busy(data_source, solution_str, ground_truth, extra_info=None):
    """Writes its process id next to ``ground_truth`` (a folder), then spins on the CPU forever."""
    Path(ground_truth, str(os.getpid())).touch()
    while True:
        pass


def by_truth(data_source, solution_str, ground_truth, extra_info=None):
    """``fail`` raises at once, ``die`` kills its process, ``slow`` takes 1.5 s, ``hang`` never returns."""
    if ground_truth == "fail":
        raise ValueError("bad sample")
    if ground_truth == "die":
        os._exit(3)
    if ground_truth == "slow":
        time.sleep(1.5)
    if ground_truth == "hang":
        time.sleep(3600)
    return 1.0


def _alive(pid: int) -> bool:
    """Whether ``pid`` is a running (not zombie) process."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def test_eight_hung_samples_with_a_two_second_timeout_finish_within_ten_seconds(tiny_tokenizer):
    batch, _ = make_reward_batch(tiny_tokenizer, ["a"] * 8)
    manager = NaiveRewardManager(tiny_tokenizer, hang, RewardModelConfig(scorer_timeout=2.0))
    start = time.monotonic()
    try:
        result = manager(batch)
    finally:
        manager.close()
    assert time.monotonic() - start < 10
    assert result.metrics["reward/scorer_timeouts"] == 8
    assert result.token_level_scores.abs().sum() == 0


def test_a_busy_loop_scorer_stops_burning_cpu_at_its_timeout(tiny_tokenizer, tmp_path):
    batch, _ = make_reward_batch(tiny_tokenizer, ["a", "b"], ground_truths=[str(tmp_path)] * 2)
    manager = NaiveRewardManager(tiny_tokenizer, busy, RewardModelConfig(scorer_timeout=1.0))
    result = manager(batch)
    pids = [int(p.name) for p in tmp_path.iterdir()]
    assert len(pids) == 2 and result.metrics["reward/scorer_timeouts"] == 2
    assert [pid for pid in pids if _alive(pid)] == [], "a timed-out scorer is still running"
    manager.close()


def test_fail_fast_stops_at_the_first_failure(tiny_tokenizer):
    batch, _ = make_reward_batch(tiny_tokenizer, ["a"] * 6, ground_truths=["hang"] * 5 + ["fail"])
    manager = NaiveRewardManager(tiny_tokenizer, by_truth, RewardModelConfig(scorer_timeout=60, scorer_fail_fast=True))
    start = time.monotonic()
    with pytest.raises(RewardError, match="raised an exception for 1 of 6 sample.*sample 5.*ValueError: bad sample"):
        manager(batch)
    assert time.monotonic() - start < 10, "fail-fast waited for the hung samples"
    manager.close()


def test_the_batch_bound_stops_a_batch_of_slow_samples(tiny_tokenizer):
    batch, _ = make_reward_batch(tiny_tokenizer, ["a"] * 4, ground_truths=["slow"] * 4)
    config = RewardModelConfig(scorer_timeout=30, scorer_batch_timeout=2.0, scorer_workers=1)
    manager = NaiveRewardManager(tiny_tokenizer, by_truth, config)
    start = time.monotonic()
    result = manager(batch)
    manager.close()
    assert time.monotonic() - start < 4
    assert result.token_level_scores.sum().item() == 1.0, "one sample fits in the bound"
    assert result.metrics["reward/scorer_timeouts"] == 3


def test_samples_are_scored_concurrently_and_a_dead_process_is_one_error(tiny_tokenizer):
    truths = ["slow"] * 4 + ["die", "ok"]
    batch, _ = make_reward_batch(tiny_tokenizer, ["a"] * 6, ground_truths=truths)
    manager = NaiveRewardManager(tiny_tokenizer, by_truth, RewardModelConfig(scorer_timeout=30, scorer_workers=4))
    start = time.monotonic()
    result = manager(batch)
    assert time.monotonic() - start < 4, "four 1.5 s samples on four processes"
    assert result.token_level_scores.sum(-1).tolist() == [1.0, 1.0, 1.0, 1.0, 0.0, 1.0]
    assert result.metrics["reward/scorer_errors"] == 1
    again = manager(batch)  # the pool replaced the dead process
    assert again.token_level_scores.sum().item() == 5.0
    manager.close()


def test_a_batched_scorer_that_hangs_falls_back_to_single_samples(tiny_tokenizer):
    def batched(data_sources, solution_strs, ground_truths, extra_infos):
        if len(solution_strs) > 1:
            time.sleep(3600)
        return [by_truth(d, s, g, e) for d, s, g, e in zip(data_sources, solution_strs, ground_truths, extra_infos)]

    batch, _ = make_reward_batch(tiny_tokenizer, ["a", "b"], ground_truths=["ok", "ok"])
    manager = BatchRewardManager(tiny_tokenizer, batched, RewardModelConfig(scorer_timeout=1.0))
    result = manager(batch)
    manager.close()
    assert result.token_level_scores.sum(-1).tolist() == [1.0, 1.0]


def test_timeout_zero_scores_inline(tiny_tokenizer):
    batch, _ = make_reward_batch(tiny_tokenizer, ["a", "b"])
    result = NaiveRewardManager(tiny_tokenizer, lambda **kw: float(os.getpid()), RewardModelConfig(scorer_timeout=0))(
        batch
    )
    assert set(result.token_level_scores.sum(-1).tolist()) == {float(os.getpid())}


def test_hung_scorer_processes_end_with_the_controller():
    code = textwrap.dedent(
        """
        import time
        from rlcore.reward.pool import ScorerPool
        pool = ScorerPool(lambda: time.sleep(3600), workers=2, timeout=0.5)
        print([o.kind for o in pool.map([{}, {}])], flush=True)
        """
    )
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "['timeout', 'timeout']"
    assert time.monotonic() - start < 30


def test_scorer_processes_die_with_a_killed_controller(tmp_path):
    """A controller killed with SIGKILL leaves no scorer behind, hung or idle (they would hold its stdout)."""
    code = textwrap.dedent(
        f"""
        import os, signal, time
        from pathlib import Path
        from rlcore.reward.pool import ScorerPool

        def score(hang):
            Path({str(tmp_path)!r}, str(os.getpid())).touch()
            if hang:
                time.sleep(3600)
            return 1.0

        pool = ScorerPool(score, workers=3, timeout=600)
        pool.map([{{"hang": False}}, {{"hang": False}}])
        import threading
        threading.Timer(1.0, lambda: os.kill(os.getpid(), signal.SIGKILL)).start()
        pool.map([{{"hang": True}}])
        """
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == -9, proc.stderr
    pids = [int(p.name) for p in tmp_path.iterdir()]
    assert len(pids) == 2, "two workers, the first one reused for the hung call"
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_alive(pid) for pid in pids):
        time.sleep(0.2)
    assert [pid for pid in pids if _alive(pid)] == []


def test_a_scorer_process_ends_on_sigterm_under_the_controllers_stop_handler(tiny_tokenizer) -> None:
    """Scorer processes are forked while the controller's SIGTERM handler (finish the step, then stop) is
    installed; they must not inherit it, or multiprocessing's terminate() at interpreter exit cannot end them
    and the exiting controller waits for them forever."""
    import multiprocessing
    import signal

    previous = signal.signal(signal.SIGTERM, lambda signum, frame: None)
    try:
        manager = NaiveRewardManager(tiny_tokenizer, by_truth, RewardModelConfig(scorer_timeout=30, scorer_workers=1))
        batch, _ = make_reward_batch(tiny_tokenizer, ["a"], ground_truths=["ok"])
        manager(batch)
    finally:
        signal.signal(signal.SIGTERM, previous)
    (scorer,) = [p for p in multiprocessing.active_children() if p.name == "rlcore-scorer"]
    scorer.terminate()
    scorer.join(10)
    assert not scorer.is_alive()
    manager.close()


# ----------------------------------------------------------------- chunks: several samples per message
def scored_by(ground_truth):
    """``hang`` never returns, ``die`` kills its process, ``slow`` takes 0.3 s, ``fail`` raises,
    ``unsendable`` returns a value that cannot be pickled; else the worker's process id."""
    if ground_truth == "hang":
        time.sleep(3600)
    if ground_truth == "die":
        os._exit(3)
    if ground_truth == "slow":
        time.sleep(0.3)
    if ground_truth == "fail":
        raise ValueError("bad sample")
    if ground_truth == "unsendable":
        return lambda: None
    return os.getpid()


def _pool(workers, timeout, batch_timeout=None):
    return ScorerPool(scored_by, workers=workers, timeout=timeout, batch_timeout=batch_timeout)


def _calls(*truths):
    return [{"ground_truth": t} for t in truths]


def test_a_worker_gets_its_samples_as_one_chunk_dealt_round_robin():
    pool = _pool(workers=2, timeout=30)
    try:
        pids = [o.value for o in pool.map(_calls("slow", *["ok"] * 7))]
    finally:
        pool.close()
    # one at a time, the free worker would score all the fast samples while the other runs the slow one
    assert len(set(pids[1::2])) == 1 and pids[2::2] == [pids[0]] * 3 and pids[0] != pids[1], pids


def test_a_hung_sample_in_a_chunk_times_out_alone_and_the_rest_of_its_chunk_is_scored_elsewhere():
    pool = _pool(workers=1, timeout=0.5)
    start = time.monotonic()
    try:
        outcomes = pool.map(_calls("ok", "hang", "ok", "ok"))
        again = pool.map(_calls("ok"))
    finally:
        pool.close()
    assert time.monotonic() - start < 3
    assert [o.kind for o in outcomes] == ["ok", "timeout", "ok", "ok"] and outcomes[1].value == "sample"
    assert outcomes[2].value == outcomes[3].value != outcomes[0].value, "a fresh worker scored the rest"
    assert again[0].value == outcomes[3].value, "the fresh worker is kept"


def test_a_worker_that_dies_mid_chunk_is_an_error_of_that_sample_only():
    pool = _pool(workers=1, timeout=30)
    try:
        outcomes = pool.map(_calls("ok", "die", "ok", "ok"))
    finally:
        pool.close()
    assert [o.kind for o in outcomes] == ["ok", "error", "ok", "ok"]
    assert "exit code 3" in str(outcomes[1].value)
    assert outcomes[2].value == outcomes[3].value != outcomes[0].value


def test_the_timeout_clock_of_a_chunk_member_starts_when_the_member_starts():
    pool = _pool(workers=1, timeout=0.8)  # 0.5 s of slack per sample for a loaded machine's scheduling
    try:
        outcomes = pool.map(_calls(*["slow"] * 4))  # one chunk: 1.2 s in all (past the timeout), 0.3 s each
    finally:
        pool.close()
    assert [o.kind for o in outcomes] == ["ok"] * 4
    assert len({o.value for o in outcomes}) == 1, "one worker, never killed"


def test_the_batch_timeout_covers_the_unstarted_members_of_a_chunk():
    pool = _pool(workers=1, timeout=30, batch_timeout=0.5)
    start = time.monotonic()
    try:
        outcomes = pool.map(_calls("ok", "hang", "ok", "ok"))
    finally:
        pool.close()
    assert time.monotonic() - start < 2
    assert [(o.kind, o.value) for o in outcomes[1:]] == [("timeout", "batch")] * 3 and outcomes[0].kind == "ok"


def test_fail_fast_in_a_chunk_leaves_its_unfinished_samples_unscored():
    pool = _pool(workers=1, timeout=30)
    start = time.monotonic()
    try:
        outcomes = pool.map(_calls("ok", "fail", "hang", "ok"), stop=lambda o: o.kind == "error")
        again = pool.map(_calls("ok", "ok"))
    finally:
        pool.close()
    assert time.monotonic() - start < 3
    assert outcomes[0].kind == "ok" and outcomes[1].kind == "error" and outcomes[2:] == [None, None]
    assert [o.kind for o in again] == ["ok", "ok"]


def test_unsendable_values_are_reported_per_sample():
    from rlcore.errors import RLCoreError

    pool = _pool(workers=1, timeout=30)
    try:
        outcomes = pool.map(_calls("ok", "unsendable", "ok"))
        assert [o.kind for o in outcomes] == ["ok", "error", "ok"]
        assert "cannot be sent back" in str(outcomes[1].value)
        with pytest.raises(RLCoreError, match="sample 2's arguments"):
            pool.map(_calls("ok", "ok") + [{"ground_truth": lambda: None}])
        assert [o.kind for o in pool.map(_calls("ok"))] == ["ok"], "the pool still works"
    finally:
        pool.close()


# ----------------------------------------------------------------- containment: process groups, output
def _wait_dead(pids: list[int], seconds: float = 10.0) -> list[int]:
    """The ``pids`` still alive after waiting up to ``seconds`` for them to die."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and any(_alive(pid) for pid in pids):
        time.sleep(0.1)
    return [pid for pid in pids if _alive(pid)]


def starts_a_child(folder: str) -> float:
    """Starts ``sleep 300`` (inheriting stdout/stderr) and leaves it running; writes both process ids."""
    child = subprocess.Popen(["sleep", "300"])
    Path(folder, f"{os.getpid()}-{child.pid}").touch()
    return 1.0


def test_closing_the_pool_kills_what_a_scorer_started(tmp_path: Path) -> None:
    pool = ScorerPool(starts_a_child, workers=2, timeout=30)
    try:
        assert [o.kind for o in pool.map([{"folder": str(tmp_path)}] * 2)] == ["ok", "ok"]
        pairs = [tuple(int(x) for x in p.name.split("-")) for p in tmp_path.iterdir()]
        for worker, child in pairs:
            assert os.getpgid(worker) == worker, "each scorer process leads its own process group"
            assert os.getpgid(child) == worker
        assert all(_alive(child) for _, child in pairs)
    finally:
        pool.close()
    assert _wait_dead([pid for pair in pairs for pid in pair]) == []


PIPELINE = """
import sys
from rlcore.reward.pool import ScorerPool
sys.path.insert(0, {tests!r})
from test_scorer_pool import starts_a_child

pool = ScorerPool(starts_a_child, workers=1, timeout=30)
print([o.kind for o in pool.map([{{"folder": {folder!r}}}])], flush=True)
print("the run ends without closing its pool", flush=True)
"""


def test_a_scorers_leftover_child_does_not_hold_the_runs_output_open(tmp_path: Path) -> None:
    """``rlcore run ... | tee log``: the pipe must reach EOF when the run ends, whatever a scorer started."""
    code = PIPELINE.format(tests=str(Path(__file__).parent), folder=str(tmp_path))
    start = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate(timeout=60)  # waits for EOF on both pipes, as a pipeline does
    assert proc.returncode == 0, err
    assert time.monotonic() - start < 45, "the output pipe was held open after the run ended"
    assert out.splitlines() == ["['ok']", "the run ends without closing its pool"]
    ((worker, child),) = [tuple(int(x) for x in p.name.split("-")) for p in tmp_path.iterdir()]
    assert _wait_dead([worker, child]) == [], "the scorer's child died with the run"


def prints(size: int) -> float:
    print("x" * size, flush=True)
    print("e" * size, file=sys.stderr, flush=True)
    return 1.0


def test_scorer_output_is_relayed_and_capped_per_batch(capsys, caplog) -> None:
    pool = ScorerPool(prints, workers=2, timeout=30, output_bytes=3000)
    out, err = "", ""
    try:
        with caplog.at_level(logging.WARNING, logger="rlcore.reward.pool"):
            pool.map([{"size": 100}])
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and not (out.strip() and err.strip()):  # relayed by a thread
                time.sleep(0.05)
                small = capsys.readouterr()
                out, err = out + small.out, err + small.err
            pool.map([{"size": 1_000_000}, {"size": 1_000_000}])
    finally:
        pool.close()
    big = capsys.readouterr()
    assert out.strip() == "x" * 100 and err.strip() == "e" * 100, "shown, each on its own stream"
    shown = big.out.count("x") + big.err.count("e")
    assert 0 < shown <= 3000 + 300, "capped at output_bytes per batch (the last batch's too)"
    cut = [r.getMessage() for r in caplog.records if "scorer_output_bytes=3000" in r.getMessage()]
    assert cut, "the cut output is reported"


def test_a_scorer_that_floods_its_output_does_not_block() -> None:
    code = textwrap.dedent(
        """
        from rlcore.reward.pool import ScorerPool

        def floods():
            for _ in range(200):
                print("y" * 100_000)
            return 1.0

        pool = ScorerPool(floods, workers=1, timeout=60, output_bytes=1000)
        print([o.kind for o in pool.map([{}, {}])], flush=True)
        pool.close()
        """
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("y") <= 1000 and "['ok', 'ok']" in proc.stdout


# ----------------------------------------------------------------- replies: each names its request
def forks_and_returns(ground_truth):
    """Forks without ``os._exit`` in the child: both processes return the sample's number."""
    os.fork()
    return int(ground_truth)


def test_a_scorer_that_forks_without_os_exit_scores_every_sample_right() -> None:
    """Before: the forked children answered too, and about two thirds of 96 samples got another one's score."""
    pool = ScorerPool(forks_and_returns, workers=4, timeout=30)
    try:
        outcomes = pool.map([{"ground_truth": str(i)} for i in range(96)])
    finally:
        pool.close()
    assert [(o.kind, o.value) for o in outcomes] == [("ok", i) for i in range(96)]


def answers_out_of_turn(data_source, solution_str, ground_truth, extra_info=None):
    """On sample '2', writes a reply for another sample on its scorer process's pipe (as a forked child that
    kept the pipe would), then returns."""
    import gc
    from multiprocessing.connection import Connection

    if ground_truth == "2":
        (pipe,) = [o for o in gc.get_objects() if isinstance(o, Connection) and not o.closed]
        pipe.send(((1, 3), "ok", 99.0))
    return 1.0


def test_a_reply_out_of_turn_stops_the_run_naming_the_scorer(tiny_tokenizer) -> None:
    """Before: the stray 99.0 became sample 2's score and every later sample of the worker took the one before."""
    from rlcore.errors import RLCoreError

    batch, _ = make_reward_batch(tiny_tokenizer, ["a"] * 4, ground_truths=["0", "1", "2", "3"])
    manager = NaiveRewardManager(
        tiny_tokenizer, answers_out_of_turn, RewardModelConfig(scorer_timeout=30, scorer_workers=1)
    )
    try:
        with pytest.raises(RLCoreError) as caught:
            manager(batch)
    finally:
        manager.close()
    assert type(caught.value).__name__ == "ScorerReplyError"
    assert str(caught.value).startswith("the reward scorer (data_source 'contract'): its scorer process (pid ") and str(
        caught.value
    ).endswith(
        ") sent a reply for sample 3 of this batch while it was scoring sample 2: something besides the scorer "
        "process's own loop wrote to its pipe (a process the scorer forked and did not end with os._exit()?), so "
        "scores would go to the wrong samples; the run stops instead"
    )


def starts_escaping_helpers(folder: str) -> float:
    """Starts a helper in a session of its own and a daemon that double-forks; writes their pids."""
    session = subprocess.Popen(["sleep", "307"], start_new_session=True)
    subprocess.run(["sh", "-c", f"setsid sh -c 'echo $$ > {folder}/daemon; exec sleep 308' &"], check=True)
    while not Path(folder, "daemon").exists() or not Path(folder, "daemon").read_text().strip():
        time.sleep(0.01)
    Path(folder, "session").write_text(str(session.pid))
    return 1.0


def test_closing_the_pool_kills_helpers_that_left_the_process_group(tmp_path: Path) -> None:
    """Before: killing the worker's process group missed both, and they outlived the run."""
    pool = ScorerPool(starts_escaping_helpers, workers=1, timeout=30)
    try:
        assert [o.kind for o in pool.map([{"folder": str(tmp_path)}])] == ["ok"]
        helpers = [int((tmp_path / name).read_text()) for name in ("session", "daemon")]
        assert all(_alive(pid) for pid in helpers)
    finally:
        pool.close()
    assert _wait_dead(helpers) == []
