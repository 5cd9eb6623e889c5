"""The supervised rounds' check (tests/chaos/containment.py) on made-up heartbeat histories:
those that must pass, and those that must fail, each for one reason."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.chaos.containment import check, commands, most_alive, read_beats


def run(identity: str, epoch: int, pid: int, start: float, end: float) -> list[dict[str, Any]]:
    """A COMMAND's heartbeats every 20 ms from ``start`` to ``end``."""
    n = round((end - start) / 0.02)
    return [
        {"id": identity, "epoch": epoch, "pid": pid, "t": start + (end - start) * i / max(n, 1)}
        for i in range(n + 1)
    ]


def kinds(beats: list[dict[str, Any]], **kw: Any) -> list[str]:
    return sorted(v.kind for v in check(beats, **kw))


# --- histories that pass --------------------------------------------------------------------


def test_a_handover_passes() -> None:
    beats = run("a", 3, 100, 1.0, 2.0) + run("b", 5, 200, 2.01, 3.0)
    assert check(beats) == []


def test_a_restart_within_a_term_passes() -> None:
    # --on-exit restart: the same supervisor and epoch, one COMMAND after the other
    beats = run("a", 3, 100, 1.0, 2.0) + run("a", 3, 101, 2.5, 3.0)
    assert check(beats) == []


def test_the_same_supervisor_leading_again_passes() -> None:
    beats = run("a", 3, 100, 1.0, 2.0) + run("b", 4, 200, 2.1, 2.5) + run("a", 7, 101, 2.6, 3.0)
    assert check(beats) == []


def test_the_order_of_the_lines_does_not_matter() -> None:
    # a frozen COMMAND appends a reading taken before its freeze after the next one started
    beats = run("a", 3, 100, 1.0, 2.0) + run("b", 5, 200, 2.01, 3.0)
    late = beats.pop(len(run("a", 3, 100, 1.0, 2.0)) - 1)
    assert check([*beats, late]) == []


def test_a_reading_equal_to_the_newer_start_is_not_judged() -> None:
    # no slack, but the order of two equal readings says nothing
    beats = run("a", 3, 100, 1.0, 2.0) + run("b", 5, 200, 2.0, 3.0)
    assert check(beats) == []


def test_liveness_passes_when_a_command_beats_soon_after_healing() -> None:
    beats = run("a", 3, 100, 1.0, 2.0) + run("b", 5, 200, 6.0, 7.0)
    assert check(beats, healed_at=5.0, live_within=1.5) == []


# --- histories that fail --------------------------------------------------------------------


def test_an_older_epoch_beating_after_a_newer_one_started_fails() -> None:
    # a frozen supervisor's COMMAND runs on while the standby starts its own
    beats = run("a", 3, 100, 1.0, 2.5) + run("b", 5, 200, 2.0, 3.0)
    violations = check(beats)
    assert [v.kind for v in violations] == ["older epoch"]
    assert "pid 100" in violations[0].text and "0.500s" in violations[0].text


def test_one_reading_past_the_newer_start_fails() -> None:
    beats = run("a", 3, 100, 1.0, 2.0) + run("b", 5, 200, 1.999, 3.0)
    assert kinds(beats) == ["older epoch"]


def test_a_stale_term_starting_after_a_newer_one_fails() -> None:
    # the newer epoch's COMMAND started (and even stopped) first; the older one came after
    beats = run("c", 17, 300, 1.0, 2.0) + run("b", 12, 200, 2.5, 3.0)
    violations = check(beats)
    assert [v.kind for v in violations] == ["older epoch"]
    assert "epoch 12" in violations[0].text.split("beat after")[0]


def test_two_commands_of_one_supervisor_fail() -> None:
    # a cancelled start leaked its COMMAND and the same term started another
    beats = run("a", 3, 100, 1.0, 3.0) + run("a", 3, 101, 2.0, 3.0)
    assert kinds(beats) == ["two COMMANDs"]


def test_a_leaked_command_beside_the_same_supervisors_next_term_fails_both_rules() -> None:
    beats = run("a", 3, 100, 1.0, 3.0) + run("a", 4, 101, 2.0, 3.0)
    assert kinds(beats) == ["older epoch", "two COMMANDs"]


def test_one_epoch_for_two_supervisors_fails() -> None:
    beats = run("a", 3, 100, 1.0, 2.0) + run("b", 3, 200, 2.5, 3.0)
    assert kinds(beats) == ["epoch shared"]


def test_no_command_after_healing_fails() -> None:
    beats = run("a", 3, 100, 1.0, 2.0) + run("b", 5, 200, 9.0, 10.0)
    assert kinds(beats, healed_at=5.0, live_within=1.5) == ["liveness"]
    assert kinds(run("a", 3, 100, 1.0, 2.0), healed_at=5.0, live_within=1.5) == ["liveness"]


def test_every_overlapping_pair_is_reported() -> None:
    beats = run("a", 3, 100, 1.0, 4.0) + run("b", 5, 200, 2.0, 4.0) + run("c", 7, 300, 3.0, 4.0)
    assert kinds(beats) == ["older epoch"] * 3


# --- the file ---------------------------------------------------------------------------------


def test_commands_and_the_file(tmp_path: Path) -> None:
    path = tmp_path / "beats.jsonl"
    assert read_beats(path) == []
    path.write_text(
        '{"id":"a","epoch":3,"pid":100,"t":1.5}\n\n{"id":"a","epoch":3,"pid":100,"t":1.0}\n'
    )
    [c] = commands(read_beats(path))
    assert (c.identity, c.epoch, c.pid, c.first, c.last, c.beats) == ("a", 3, 100, 1.0, 1.5, 2)


def test_most_alive() -> None:
    handover = run("a", 3, 100, 1.0, 2.0) + run("b", 5, 200, 2.0, 3.0)
    assert most_alive(commands(handover)) == 1
    leaked = run("a", 3, 100, 1.0, 4.0) + run("a", 3, 101, 2.0, 4.0) + run("b", 5, 200, 3.0, 4.0)
    assert most_alive(commands(leaked)) == 3
