"""Spark under random faults (tests/chaos/spark.py): the schedule, the verdict on made-up
rounds, and the soak itself on a Spark standalone cluster.

CI runs one round of four faults, one of each kind (a few minutes on 2 loaded cores, most of
it the cluster's and the JVMs' start-ups). The long run: ``HA_SPARK_SOAK_ROUNDS=20 pytest -m
slow tests/chaos/test_spark_soak.py -k long`` or ``python -m tests.chaos.spark --rounds 20``;
``HA_CHAOS_SEED`` moves the seeds. A failure prints each bad round's schedule, violations,
what the soak did and the command that replays it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ha.pipeline.commit.stream_commit import CommitRecord
from ha.pipeline.local import Event
from tests.chaos.spark import KINDS, LENGTHS, MOMENT, judge, schedule, soak, table
from tests.support.spark_cluster import missing_reason as spark_missing

SEED = int(os.environ.get("HA_CHAOS_SEED", "0"))
LONG_ROUNDS = int(os.environ.get("HA_SPARK_SOAK_ROUNDS", "5"))


def test_a_seed_fixes_the_schedule_and_the_first_four_faults_are_one_of_each_kind() -> None:
    for seed in range(50):
        faults = schedule(seed, 7)
        assert faults == schedule(seed, 7)
        assert sorted(f.kind for f in faults[:4]) == sorted(KINDS)
        assert all(0 <= f.after <= MOMENT and f.length in LENGTHS for f in faults)
    assert schedule(1, 4) != schedule(2, 4)
    assert schedule(3, 2) == schedule(3, 7)[:2]


# --- the verdict on made-up rounds ----------------------------------------------------------------


def _record(batch: int, epoch: int) -> CommitRecord:
    return CommitRecord(batch, epoch, f"jm-{epoch}", f"sha-{batch}")


def _event(name: str, batch: int, epoch: int) -> Event:
    return Event(f"jm-{epoch}", name, {"job": "j", "batch": batch, "epoch": epoch})


def _judge(**changes: object) -> list[str]:
    args: dict[str, object] = {
        "state": "succeeded",
        "digest": "d",
        "reference": "d",
        "records": [_record(0, 1), _record(1, 1), _record(2, 3)],
        "shown": {0: "sha-0", 1: "sha-1", 2: "sha-2"},
        "events": [
            _event("batch_committed", 0, 1),
            _event("batch_committed", 1, 1),
            _event("batch_committed", 2, 1),  # redone at epoch 3 after a failover: fine
            _event("batch_rejected", 2, 2),  # a deposed driver refused
            _event("batch_committed", 2, 3),
        ],
        "files": 3,
        "survivors": [],
        "exits": {"jm-2": 69},  # left, its JVM gone: EX_UNAVAILABLE
    }
    args.update(changes)
    return [v.kind for v in judge(**args)]  # type: ignore[arg-type]


def test_the_verdict_passes_a_round_with_a_failover() -> None:
    assert _judge() == []


def test_the_verdict_catches_a_deposed_write_a_torn_output_and_an_untidy_exit() -> None:
    assert _judge(state="failed") == ["stream"]
    assert _judge(digest="other") == ["digest"]
    # a batch missing from view, or shown with bytes its record does not name
    assert _judge(shown={0: "sha-0", 1: "sha-1"}) == ["log"]
    assert _judge(shown={0: "sha-0", 1: "sha-X", 2: "sha-2"}) == ["log"]
    # the log itself: an older epoch recorded after a newer one
    assert _judge(records=[_record(0, 3), _record(1, 1), _record(2, 3)]) == ["log"]
    # a driver reports a commit the log overwrote with an older epoch: a deposed write landed
    late = [_event("batch_committed", 2, 4)]
    assert _judge(events=late) == ["deposed"]
    # a refused batch whose epoch the log holds anyway
    refused = [_event("batch_rejected", 2, 3)]
    assert _judge(events=refused) == ["deposed"]
    assert _judge(survivors=[4242]) == ["jvm"]
    # a job manager that left by itself (its JVM gone) with a traceback, or did not end, or
    # exited 0 (a supervisor would not restart it); 69 (EX_UNAVAILABLE) is its contract
    assert _judge(exits={"jm-2": 1, "jm-3": None, "jm-4": 0}) == ["exit", "exit", "exit"]


# --- the soak ---------------------------------------------------------------------------------------


async def _soak(tmp_path: Path, rounds: int) -> None:
    if (reason := spark_missing()) is not None:
        pytest.skip(f"a Spark standalone cluster needs: {reason}")
    outcomes = await soak(tmp_path, list(range(SEED, SEED + rounds)))
    print(table(outcomes, sum(o.seconds for o in outcomes)))
    bad = [o.report() for o in outcomes if o.violations]
    assert not bad, "\n\n".join(bad)
    assert [o.equal for o in outcomes] == [True] * rounds
    for o in outcomes:  # the stream is long enough for each of its four faults
        assert sorted(o.applied.elements()) == sorted(KINDS), o.report()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # processes do the work: one event loop flavour is enough here


@pytest.mark.spark
@pytest.mark.slow  # 2-6 min of the suite's one-JVM-at-a-time chain: CI's 20 minutes are full
@pytest.mark.anyio
@pytest.mark.timeout(1200)
async def test_a_stream_through_one_fault_of_each_kind(tmp_path: Path) -> None:
    await _soak(tmp_path, 1)


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.anyio
@pytest.mark.timeout(0)
async def test_a_stream_through_many_rounds_long(tmp_path: Path) -> None:
    await _soak(tmp_path, LONG_ROUNDS)
