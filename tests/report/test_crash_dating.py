"""A crash's gap as the journal measures it: two `ha run` supervisors on sqlite, the active
killed with SIGKILL (or frozen with SIGSTOP past its lease), then `ha report` on their journal.

The killed active writes nothing more. The new active records when it found the lock free
(``vacant_since``) and how soon the backend ends a dead process's session (``detection``:
sqlite sees a dead process through its lock file within a poll, far sooner than its session
timeout). The report dates the killed active's end by them: the gap is what the journal
says, not a session timeout (``--session-timeout``, 10 s by default) assumed for every crash.
An active frozen past its deadline records its leaving only when it thaws, after the new
active took over; it records the deadline too (``until``): no overlap is reported.
"""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import Supervisors, ha, popen_ha, wait_until

pytest.importorskip("pyarrow")


def _records(journal: Path) -> list[dict[str, Any]]:
    if not journal.exists():
        return []
    return [json.loads(line) for line in journal.read_text().splitlines() if line.strip()]


def _actives(journal: Path) -> list[dict[str, Any]]:
    return [r for r in _records(journal) if r["to"] == "active"]


def _active_and_standby(sup: Supervisors, journal: Path) -> None:
    """`ha run` a, then b, journaling to ``journal``: once a is active and b standby."""
    for identity in ("a", "b"):
        argv = ["run", "/svc", "--id", identity, "--journal", str(journal), "--"]
        argv += [sys.executable, "-c", "import time; time.sleep(600)"]
        log = sup.directory / f"{identity}.log"
        sup.procs[identity] = popen_ha(*argv, env=sup.env, log=log)
        if identity == "a":
            wait_until(lambda: _actives(journal), "a to be active")
    wait_until(
        lambda: any(r["identity"] == "b" and r["to"] == "standby" for r in _records(journal)),
        "b to be standby",
    )


@pytest.mark.parametrize("loop", ["asyncio", "trio"])
def test_a_killed_actives_gap_is_measured_from_the_journal(tmp_path: Path, loop: str) -> None:
    journal = tmp_path / "journal.jsonl"
    with Supervisors(tmp_path, HA_ASYNC_BACKEND=loop) as sup:
        _active_and_standby(sup, journal)
        sup.procs["a"].kill()  # no record of leaving: the report must date a's end
        sup.procs["a"].wait()
        wait_until(lambda: len(_actives(journal)) == 2, "b to take over")
        sup.stop_all()  # b leaves active cleanly, on the record

    first, second = _actives(journal)
    assert (first["identity"], second["identity"]) == ("a", "b")
    # What the new active wrote: the lock seen free, sqlite's detection bound, its timeout.
    assert second["vacant_since"] is not None and second["vacant_since"] <= second["ts"]
    assert second["detection"] < second["session_timeout"]
    assert not any(r["identity"] == "a" and r["from"] == "active" for r in _records(journal))
    stopped = max(first["ts"], second["vacant_since"] - second["detection"])
    expected_gap = second["ts"] - stopped
    records = _records(journal)
    [left] = [r for r in records if r["identity"] == "b" and r["from"] == "active"]
    covered = (stopped - first["ts"]) + (left["ts"] - second["ts"])
    span = max(r["ts"] for r in records) - min(r["ts"] for r in records)

    result = ha(
        "report", str(journal), "--out", str(tmp_path / "r.html"), "--engine", "local",
        env=sup.env, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    [row] = [line.split() for line in result.stdout.splitlines() if line.startswith("/svc")]
    # failovers, crashes, gap p50 (value, unit), gap max, overlaps, available
    assert row[1:3] == ["1", "1"]
    shown = float(row[3]) / (1000 if row[4] == "ms" else 1)
    assert shown == pytest.approx(expected_gap, abs=0.0001)  # as printed, to 0.1 ms
    available = float(row[-1].rstrip("%")) / 100
    assert available == pytest.approx(covered / span, abs=0.00001)  # printed to 0.001%
    # the crash's end is marked as an estimate, dated from b's record, not assumed
    said = " ".join(result.stdout.split())  # the caption wraps
    assert "1 end(s) of killed actives dated from the new active's record" in said
    assert "assumed" not in said


@pytest.mark.parametrize("loop", ["asyncio", "trio"])
def test_a_frozen_active_thawed_after_the_takeover_is_no_overlap(tmp_path: Path, loop: str) -> None:
    journal = tmp_path / "journal.jsonl"
    with Supervisors(tmp_path, HA_ASYNC_BACKEND=loop) as sup:
        _active_and_standby(sup, journal)
        sup.procs["a"].send_signal(signal.SIGSTOP)  # frozen past its lease: b takes over
        try:
            wait_until(lambda: len(_actives(journal)) == 2, "b to take over")
        finally:
            sup.procs["a"].send_signal(signal.SIGCONT)
        wait_until(
            lambda: any(r["identity"] == "a" and r["from"] == "active" for r in _records(journal)),
            "a to record that it left active",
        )
        sup.stop_all()

    first, second = _actives(journal)
    [thawed] = [r for r in _records(journal) if r["identity"] == "a" and r["from"] == "active"]
    # a wrote its leaving when it thawed, after b's takeover; its deadline had passed before
    assert thawed["ts"] > second["ts"] > thawed["until"] > first["ts"]
    result = ha("report", str(journal), "--out", str(tmp_path / "r.html"), env=sup.env)
    assert result.returncode == 0, result.stdout + result.stderr  # 4 would be an overlap
    [row] = [line.split() for line in result.stdout.splitlines() if line.startswith("/svc")]
    assert row[1:3] == ["1", "0"]  # a failover, not a crash: both ends on record
    shown = float(row[3]) / (1000 if row[4] == "ms" else 1)
    assert shown == pytest.approx(second["ts"] - thawed["until"], abs=0.0001)
