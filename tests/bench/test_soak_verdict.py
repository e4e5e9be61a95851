"""The soak's speed verdict and its accepted run (``bench/soak.py``): a benchmark, but its
verdict is what would have caught a turn costing four times the CPU (issue 58)."""

from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from lectern_testing import logs

SOAK = Path(__file__).resolve().parents[2] / "bench" / "soak.py"


@pytest.fixture(scope="module")
def soak() -> ModuleType:
    spec = importlib.util.spec_from_file_location("lectern_bench_soak", SOAK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def result(turns_per_s: float, p95_s: float, chats: int = 20) -> dict[str, Any]:
    return {
        "chats": chats,
        "duration_s": 300.0,
        "turns": int(turns_per_s * 300),
        "turns_per_s": turns_per_s,
        "first_token_s": {"p50": p95_s * 0.7, "p95": p95_s},
        "cpu": {
            "per_turn_s": {"reranker": 0.08, "gateway": 0.07, "postgres": 0.01},
            "services_per_turn_s": 0.15,
        },
    }


def test_a_run_slower_than_the_accepted_one_fails(soak: ModuleType) -> None:
    accepted = soak.summary(result(10.0, 1.0))
    assert soak.judge(result(8.1, 1.2), accepted) == []
    slow = soak.judge(result(7.9, 1.2), accepted)
    assert len(slow) == 1 and "0.79 of the accepted run's 10.0" in slow[0]
    # another number of chats is another load: its throughput is not compared
    assert soak.judge(result(3.0, 1.2, chats=5), accepted) == []


def test_turns_that_end_in_an_error_are_no_throughput(soak: ModuleType) -> None:
    """Half the turns ending with an error event at the deadline (an overloaded stack
    without admission) is half the throughput, however quickly they ended."""
    accepted = soak.summary(result(10.0, 1.0))
    failing = {**result(10.0, 1.2), "turns_done_per_s": 5.0}
    (slow,) = soak.judge(failing, accepted)
    assert "turns answered a second 5.0 are 0.50" in slow
    assert soak.judge({**failing, "turns_done_per_s": 9.0}, accepted) == []


def test_a_run_on_another_machine_is_not_held_to_its_turns_a_second(soak: ModuleType) -> None:
    fast = {"cpu": "AVX-512 Xeon", "reader_ms_per_piece": 0.09}
    slow = {"cpu": "AVX2 EPYC", "reader_ms_per_piece": 0.40}
    accepted = soak.summary({**result(10.0, 1.0), "machine": fast})
    assert accepted["machine"] == fast
    # the same machine (within the tolerance): compared
    same = {**result(5.0, 1.2), "machine": {**fast, "reader_ms_per_piece": 0.12}}
    assert soak.other_machine(same, accepted) is None
    assert len(soak.judge(same, accepted)) == 1
    # a machine that reads 4.4x slower: not compared, and said why
    elsewhere = {**result(1.5, 1.2), "machine": slow}
    note = soak.other_machine(elsewhere, accepted)
    assert note is not None and "AVX-512 Xeon" in note and "4.44x" in note
    assert soak.judge(elsewhere, accepted) == []
    # the first token p95 is held everywhere
    assert len(soak.judge({**result(1.5, 4.0), "machine": slow}, accepted)) == 1
    # an accepted run from before the probe is compared as before
    assert len(soak.judge(elsewhere, soak.summary(result(10.0, 1.0)))) == 1


def test_the_machine_probe_reads_a_word_piece(soak: ModuleType) -> None:
    machine = soak.probe_machine(reads=2)
    assert machine["cpu"] and 0.001 < machine["reader_ms_per_piece"] < 10
    # and at what rate it reads, beside what one core multiplies (both well above 0.1
    # GFLOP/s on any machine that runs the stack)
    assert machine["reader_gflops"] > 0.1 and machine["core_gflops"] > 0.1


def test_the_readers_operations_are_its_matrix_products(soak: ModuleType) -> None:
    """3 layers of 384 wide with a 1,536 feed-forward: at 192 pieces, 2 x 192 x (4 x 384^2 +
    2 x 384 x 1,536) + 4 x 192^2 x 384 = 736.1 million a layer; attention's share grows with
    the square of the length."""
    assert soak.reader_flops(192) == 3 * 736_100_352
    assert soak.reader_flops(384) > 2 * soak.reader_flops(192)


def test_error_events_are_counted_by_kind(soak: ModuleType) -> None:
    """Two turns that failed the same way count as one kind: ids and seconds cut."""
    one = {"reason": "upstream", "message": "no reply on lectern.rerank.v1 within 10.0 s"}
    two = {"reason": "upstream", "message": "no reply on lectern.rerank.v1 within 9.5 s"}
    assert (
        soak.error_kind(one)
        == soak.error_kind(two)
        == ("upstream: no reply on lectern.rerank.v1 within N s")
    )
    other = {
        "reason": "database_unavailable",
        "message": "turn 3f2b1c4d-0000-4000-8000-000000000000",
    }
    assert soak.error_kind(other) == "database_unavailable: turn N"


def test_first_token_p95_is_held_at_twenty_chats(soak: ModuleType) -> None:
    assert soak.judge(result(10.0, 1.5), None) == []
    late = soak.judge(result(10.0, 1.6), None)
    assert late == ["first token p95 1600 ms over 1500 ms at 20 chats"]
    assert soak.judge(result(10.0, 4.0, chats=40), None) == []


def test_the_accepted_run_is_kept_in_the_benchmarks_page(soak: ModuleType, tmp_path: Path) -> None:
    page = tmp_path / "benchmarks.md"
    page.write_text("# Benchmarks\n\nText before.\n")
    assert soak.accepted_run(page) is None
    soak.accept(result(12.5, 1.1), page)
    kept = soak.accepted_run(page)
    assert kept is not None and kept["turns_per_s"] == 12.5 and kept["chats"] == 20
    assert kept["cpu_per_turn_s"]["reranker"] == 0.08
    text = page.read_text()
    assert text.startswith("# Benchmarks\n\nText before.\n")
    assert "| turns (a second) | 3750 (12.5) |" in text
    # accepting again replaces the block in place, and what follows it stays
    page.write_text(text + "\n## Later section\n")
    soak.accept(result(14.0, 0.9), page)
    again = page.read_text()
    assert again.count(soak.BEGIN) == 1 and again.rstrip().endswith("## Later section")
    assert soak.accepted_run(page)["turns_per_s"] == 14.0


def test_error_lines_are_read_from_json_logs(tmp_path: Path) -> None:
    line = (
        '{"time": "2026-12-02 04:47:02,123", "level": "ERROR", "name": "lectern.broker", '
        '"message": "boom", "exc_info": "Traceback...\\nValueError: bad"}'
    )
    found = logs.parse("ingest", line)
    assert found is not None
    assert found.describe() == "ingest: lectern.broker: boom [ValueError: bad]"
    assert found.at is not None and time.localtime(found.at).tm_min == 47
    assert logs.parse("ingest", line.replace('"ERROR"', '"WARNING"')) is None
    (tmp_path / "gateway.log").write_text(f"{line}\nnot json at INFO\n2026 gateway ERROR x: y\n")
    (tmp_path / "memory.log").write_text(line.replace('"ERROR"', '"INFO"') + "\n")
    lines = logs.error_lines(tmp_path)
    assert {k: len(v) for k, v in lines.items()} == {"gateway": 2, "memory": 0}
    assert lines["gateway"][1].at is None and lines["gateway"][1].message.endswith("x: y")


def test_an_error_line_is_explained_only_by_a_lost_peer_during_a_fault() -> None:
    """``make chaos`` fails on any ERROR line no injected fault explains (issue 61)."""

    def error(at: float | None, message: str, exception: str = "") -> logs.LogError:
        return logs.LogError("ingest", at, "lectern.broker", message, exception)

    faults = [("NATS leader killed", 100.0, 110.0), ("quorum lost", 200.0, 230.0)]
    lost = error(105.0, "publish failed", "nats.errors.NoRespondersError: nats: no responders")
    assert logs.explained_by(lost, faults, grace_s=15) == "NATS leader killed"
    late = error(124.0, "request failed", "TimeoutError: timed out")
    assert logs.explained_by(late, faults, grace_s=15) == "NATS leader killed"
    # the same words with no fault on, or long after one: unexplained
    assert logs.explained_by(error(150.0, "timed out"), faults, grace_s=15) is None
    assert logs.explained_by(error(50.0, "connection closed"), faults, grace_s=15) is None
    # a handler's own exception during a fault is still a defect
    crash = error(210.0, "handler failed", "KeyError: 'chunk_id'")
    assert logs.explained_by(crash, faults, grace_s=15) is None
    # a line with no time cannot be placed in a fault
    assert logs.explained_by(error(None, "timed out"), faults, grace_s=15) is None
