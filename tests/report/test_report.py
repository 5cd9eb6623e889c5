"""The election journal report on hand-made journals (exact answers), generated journals
(known injected overlaps), and journals written by real electors. One SparkSession."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import anyio
import pytest

pytest.importorskip("pyspark")

from ha.report import run_report  # noqa: E402
from ha.report.analysis import (  # noqa: E402
    analyze,
    leadership_intervals,
    read_journals,
    sweep,
)
from ha.report.plots import charts, local_time  # noqa: E402
from ha.report.render import render_html, summary_table  # noqa: E402
from ha.report.synthetic import generate_journal  # noqa: E402
from tests.support.spark_session import spark  # noqa: E402

__all__ = ("spark",)  # the fixture

pytestmark = pytest.mark.spark


def _write(path: Path, rows: list[tuple[object, ...]], extra: list[str] = ()) -> str:  # type: ignore[assignment]
    keys = ("ts", "election", "identity", "from", "to", "epoch", "cause")
    with path.open("w") as f:
        for row in rows:
            f.write(json.dumps(dict(zip(keys, row, strict=True))) + "\n")
        for line in extra:
            f.write(line + "\n")
    return str(path)


def _swept(spark, path: str, session_timeout: float = 10.0) -> list[dict[str, object]]:  # type: ignore[no-untyped-def]
    events = read_journals(spark, [path]).where("valid").drop("valid")
    swept = sweep(leadership_intervals(events, session_timeout))
    rows = swept.orderBy("election", "start").collect()
    return [r.asDict() for r in rows]


HAND = [
    (0.0, "/a", "x", "neutral", "standby", None, "connected"),
    (0.0, "/a", "y", "neutral", "standby", None, "connected"),
    (1.0, "/a", "x", "standby", "active", 1, "won"),
    (11.0, "/a", "x", "active", "fenced", None, "session expired"),
    (13.5, "/a", "y", "standby", "active", 2, "won"),
    (20.0, "/a", "x", "fenced", "standby", None, "rejoined"),
    (30.0, "/a", "y", "active", "neutral", None, "quit"),
    (30.25, "/a", "x", "standby", "active", 3, "won"),
    (40.0, "/a", "x", "active", "neutral", None, "quit"),
    # A second election in the same file, with the records out of order.
    (105.0, "/b", "p", "active", "neutral", None, "quit"),
    (100.0, "/b", "p", "standby", "active", 7, "won"),
    (100.0, "/b", "q", "neutral", "standby", None, "connected"),
]


def test_intervals_and_gaps_of_a_hand_made_journal(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = _write(tmp_path / "j.jsonl", HAND, extra=["not json", '{"ts": 1, "election": "/a"}'])
    rows = _swept(spark, path)
    got = [
        (r["election"], r["identity"], r["start"], r["end"], r["epoch"], r["kind"]) for r in rows
    ]
    assert got == [
        ("/a", "x", 1.0, 11.0, 1, "first"),
        ("/a", "y", 13.5, 30.0, 2, "failover"),
        ("/a", "x", 30.25, 40.0, 3, "failover"),
        ("/b", "p", 100.0, 105.0, 7, "first"),
    ]
    assert [r["gap"] for r in rows] == [None, 2.5, 0.25, None]
    assert all(r["end_kind"] == "left" for r in rows)

    report = analyze(spark, [path])
    a, b = report.summary.to_dict("records")
    assert report.malformed == 2
    assert (a["events"], a["intervals"], a["failovers"], a["overlaps"]) == (9, 3, 2, 0)
    assert a["gap_max"] == 2.5 and a["gap_p50"] in (0.25, 2.5)
    assert a["covered_s"] == pytest.approx(10 + 16.5 + 9.75)
    assert a["availability"] == pytest.approx(36.25 / 40)
    assert a["transitions_per_hour"] == pytest.approx(9 / (40 / 3600))
    assert (a["first_epoch"], a["last_epoch"], a["distinct_epochs"], a["epoch_violations"]) == (
        1,
        3,
        3,
        0,
    )
    assert (b["intervals"], b["failovers"], b["availability"]) == (1, 0, 1.0)
    assert report.overlap_count == 0


def test_a_known_overlap_is_found_with_its_holders_and_times(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    rows = [
        (0.0, "/e", "x", "standby", "active", 1, "won"),
        # y takes over at 8 while x still acts until 10: two actives for 2 s.
        (8.0, "/e", "y", "standby", "active", 2, "won"),
        (10.0, "/e", "x", "active", "fenced", None, "epoch superseded"),
        (20.0, "/e", "y", "active", "neutral", None, "quit"),
        (21.0, "/e", "z", "standby", "active", 3, "won"),
    ]
    report = analyze(spark, [_write(tmp_path / "j.jsonl", rows)])
    assert report.overlap_count == 1
    [o] = report.overlaps.to_dict("records")
    assert (o["election"], o["first"], o["second"]) == ("/e", "x", "y")
    assert (o["start"], o["end"], o["overlap"]) == (8.0, 10.0, 2.0)
    assert (o["first_epoch"], o["second_epoch"]) == (1, 2)
    [s] = report.summary.to_dict("records")
    assert (s["failovers"], s["gap_max"], s["open_intervals"]) == (1, 1.0, 1)
    html = render_html(report)
    assert "1 overlapping leadership interval" in html and "data:image/svg+xml;base64," in html


def test_crashes_restarts_and_epoch_errors(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    rows = [
        (0.0, "/e", "x", "standby", "active", 5, "won"),
        # x is killed (no record); y wins with a higher epoch at 4: x was deposed by then.
        (4.0, "/e", "y", "standby", "active", 6, "won"),
        (9.0, "/e", "y", "active", "neutral", None, "quit"),
        # z wins with a LOWER epoch: an epoch error, and still a failover.
        (9.5, "/e", "z", "standby", "active", 4, "won"),
        # z restarts: its new process's first record closes the old interval.
        (12.0, "/e", "z", "neutral", "standby", None, "connected"),
        (13.0, "/e", "x", "standby", "active", 8, "won"),
    ]
    # x was killed: y got the lock a session timeout (0.5 s) after x's last contact; the
    # journal says neither when y found the lock free nor the timeout: assumed.
    swept = _swept(spark, _write(tmp_path / "j.jsonl", rows), session_timeout=0.5)
    assert [(r["identity"], r["end"], r["end_kind"]) for r in swept] == [
        ("x", 3.5, "assumed"),
        ("y", 9.0, "left"),
        ("z", 12.0, "restarted"),
        ("x", 13.0, "open"),
    ]
    # Every failover has a gap; a crash's counts from the killed active's estimated end.
    assert [r["gap"] for r in swept] == [None, 0.5, 0.5, 1.0]
    assert [r["crash"] for r in swept] == [None, True, False, True]
    assert [r["epoch_ok"] for r in swept] == [True, True, False, True]

    # An interval without an epoch hides a repeated one from the epoch check.
    hidden = [
        (0.0, "/n", "x", "standby", "active", 5, "won"),
        (1.0, "/n", "x", "active", "neutral", None, "quit"),
        (2.0, "/n", "y", "standby", "active", None, "won"),
        (3.0, "/n", "y", "active", "neutral", None, "quit"),
        (4.0, "/n", "z", "standby", "active", 5, "won"),
    ]
    report = analyze(spark, [_write(tmp_path / "k.jsonl", rows + hidden)], session_timeout=0.5)
    e, n = report.summary.to_dict("records")
    assert (e["epoch_violations"], e["distinct_epochs"]) == (1, 4)
    assert (n["epoch_violations"], n["distinct_epochs"], n["intervals"]) == (0, 1, 3)


# The journals of a real kill -9 on ZooKeeper (session timeout 4 s): a was active from 0, was
# killed at about 4.0 and restarted at 14.6; b took over at 7.8. Nothing records a's end.
KILLED = [
    (0.0, "/k", "a", "neutral", "active", 11, "first in the queue, nobody to fence"),
    (3.0, "/k", "b", "neutral", "standby", None, "behind a"),
    (7.8, "/k", "b", "standby", "active", 16, "won the election"),
    (14.6, "/k", "a", "neutral", "standby", None, "behind b"),
    (16.0, "/k", "b", "active", "neutral", None, "quit"),
    # Restarted before the takeover: the new process's first record bounds the old one's end.
    (0.0, "/r", "a", "neutral", "active", 1, "first in the queue, nobody to fence"),
    (2.0, "/r", "a", "neutral", "standby", None, "behind b"),
    (10.0, "/r", "b", "standby", "active", 2, "won the election"),
    (12.0, "/r", "b", "active", "neutral", None, "quit"),
]


def test_a_killed_active_leaves_a_gap_and_costs_availability(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = _write(tmp_path / "j.jsonl", KILLED)
    report = analyze(spark, [path], session_timeout=4.0)
    k, r = report.summary.to_dict("records")
    # a's interval ends a session timeout before b's start: 3.8; the outage is 4 s, not 0.
    assert (k["failovers"], k["crashes"]) == (1, 1)
    assert k["gap_max"] == pytest.approx(4.0)
    assert k["availability"] == pytest.approx((3.8 + 8.2) / 16)
    assert (r["failovers"], r["crashes"]) == (1, 1)
    assert r["gap_max"] == pytest.approx(8.0)
    assert r["availability"] == pytest.approx((2.0 + 2.0) / 12)
    # Without a session timeout (a backend that sees a death at once) the gap is the takeover.
    at_once = _swept(spark, path, session_timeout=0.0)
    assert [(r["identity"], r["end"], r["gap"]) for r in at_once if r["election"] == "/k"] == [
        ("a", 7.8, None),
        ("b", 16.0, 0.0),
    ]


def test_a_generated_journal_with_injected_overlaps(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    truth = generate_journal(tmp_path / "gen", events=60_000, elections=3, overlaps=3, seed=7)
    # Journals arrive from many processes in any order: shuffle lines over three files.
    lines = [line for f in truth.files for line in f.read_text().splitlines()]
    random.Random(1).shuffle(lines)
    parts = [tmp_path / f"part-{i}.jsonl" for i in range(3)]
    for i, part in enumerate(parts):
        part.write_text("\n".join(lines[i::3]) + "\n")
    report = analyze(spark, [str(p) for p in parts])

    assert report.events == truth.events
    assert report.overlap_count == 3
    found = sorted(
        (o["election"], o["first"], o["second"], round(o["start"], 4), round(o["end"], 4))
        for o in report.overlaps.to_dict("records")
    )
    expected = sorted(
        (o.election, o.first, o.second, round(o.start, 4), round(o.end, 4)) for o in truth.overlaps
    )
    assert found == expected
    for s in report.summary.to_dict("records"):
        name = s["election"]
        assert s["intervals"] == truth.intervals[name]
        assert s["failovers"] == truth.failovers[name]
        assert s["last_epoch"] == truth.last_epoch[name]
        assert s["epoch_violations"] == 0
        assert s["gap_max"] == pytest.approx(truth.gaps[name].max(), abs=2e-6)
        assert s["open_intervals"] == 1


def _plain_rates(spark, paths: list[str], bucket: float) -> list[tuple[str, float, int]]:  # type: ignore[no-untyped-def]
    """Records per election and bucket, counted one by one."""
    from pyspark.sql import functions as F

    events = read_journals(spark, paths).where("valid")
    rows = (
        events.groupBy("election", (F.floor(F.col("ts") / bucket) * bucket).alias("bucket"))
        .count()
        .collect()
    )
    return sorted((r["election"], r["bucket"], r["count"]) for r in rows)


@pytest.mark.parametrize("term_s", [3.0, 600.0])  # a journal of 2 h (minutes), of weeks (hours)
def test_counts_and_rates_are_every_records(spark, tmp_path: Path, term_s: float) -> None:  # type: ignore[no-untyped-def]
    truth = generate_journal(
        tmp_path / "gen", events=6_000, elections=2, mean_term_s=term_s, overlaps=1, seed=11
    )
    # Malformed records amid a holder's records: counted, and in no interval.
    bad = [
        json.dumps({"ts": 1_700_000_050.0, "election": "/service-000", "identity": "host-0",
                    "from": "active", "to": "nowhere", "epoch": None}),
        json.dumps({"ts": 1_700_000_051.0, "election": "/service-000", "identity": "host-0",
                    "from": "standby", "to": "active"}),  # no epoch: still a record
        '{"ts": 1700000052.0, "election": "/service-000", "identity": "host-0"',
    ]  # fmt: skip
    extra = _write(tmp_path / "extra.jsonl", [], extra=bad)
    paths = [str(tmp_path / "gen"), extra]
    report = analyze(spark, paths)
    assert report.malformed == 2
    assert report.events == truth.events + 1
    assert report.rate_bucket_s == (60.0 if term_s < 10 else 3600.0)
    rates = sorted(
        (r["election"], r["bucket"], r["transitions"]) for r in report.rates.to_dict("records")
    )
    assert rates == _plain_rates(spark, paths, report.rate_bucket_s)
    events = read_journals(spark, paths).where("valid").groupBy("election").count().collect()
    counts = dict(zip(report.summary["election"], report.summary["events"], strict=True))
    assert counts == {r["election"]: r["count"] for r in events}


def test_report_files_and_terminal_table(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from rich.console import Console

    truth = generate_journal(tmp_path / "gen", events=20_000, elections=2, overlaps=1, seed=3)
    console = Console(record=True, width=160)
    out = tmp_path / "report.html"
    report = run_report([str(tmp_path / "gen")], out, spark=spark, console=console)
    text = console.export_text()
    assert "/service-000" in text and "1 overlaps" in text
    html = out.read_text()
    assert html.count("data:image/svg+xml;base64,") == 5  # timeline, gaps, rate, close-up, epochs
    assert report.events == truth.events
    assert summary_table(report).row_count == 2


def test_the_terminal_table_fits_80_columns_with_local_times(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from rich.console import Console

    long_name = "/a/rather/long/election/path/for/the/payments-service"
    rows = [(1_790_000_000.0 + ts, long_name, *rest) for ts, _, *rest in KILLED[:5]]
    report = analyze(spark, [_write(tmp_path / "j.jsonl", rows)], session_timeout=4.0)
    console = Console(record=True, width=200)  # wide: the table's own width is measured
    console.print(summary_table(report))
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= 80
    assert local_time(1_790_000_000.0) in text  # when the journal starts, in local time
    assert "1790000000" not in text
    assert "4 s, --session-timeout" in " ".join(text.split())  # the crash rule's assumption
    assert "75.000%" in text  # available: 12 s of 16


def test_every_chart_has_data_and_a_legend(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    generate_journal(tmp_path / "gen", events=20_000, elections=2, overlaps=1, seed=3)
    long = analyze(spark, [str(tmp_path / "gen")])
    short = analyze(spark, [_write(tmp_path / "j.jsonl", HAND)])
    for report, expected in (
        (long, ["Who was active", "Failover gaps", "Transitions per hour", "up close", "Epochs"]),
        # 40 s of records: a rate line would be one point
        (short, ["Who was active", "Failover gaps", "Epochs"]),
    ):
        drawn = charts(report)
        assert len(drawn) == len(expected)
        for chart, start in zip(drawn, expected, strict=True):
            assert start in chart.caption
            for panel in chart.panels:
                assert panel.keys, chart.caption
                assert panel.has_data(), chart.caption


# --- journals written by real electors -----------------------------------------------------


async def _real_run(workdir: Path) -> int:
    """Three electors on the memory backend, each process with its own journal; four
    failovers, alternately a graceful quit and a crash, each followed by a restart of the
    same identity (a new elector, as a restarted process would be)."""
    import ha
    from ha.drivers.memory import MemoryCluster, MemoryDriver
    from ha.testing import faults

    cluster = f"report-{os.getpid()}-{id(workdir)}"
    timing = ha.Timing(backoff=ha.Backoff(initial=0.005, maximum=0.05), hook_timeout=0.5)

    class Idle:
        async def become_active(self, lease: ha.Lease) -> None:
            await anyio.sleep_forever()

    live: dict[str, tuple[MemoryDriver, ha.Elector, anyio.CancelScope]] = {}

    async def wait_for(cond) -> None:  # type: ignore[no-untyped-def]
        with anyio.fail_after(10):
            while not cond():  # noqa: ASYNC110 - polls state owned by other tasks
                await anyio.sleep(0.005)

    def actives() -> list[str]:
        return [n for n, (_, e, _) in live.items() if e.state is ha.State.ACTIVE]

    def settled() -> bool:
        states = [e.state for _, e, _ in live.values()]
        return len(actives()) == 1 and all(s in (ha.State.ACTIVE, ha.State.STANDBY) for s in states)

    async with anyio.create_task_group() as tg:

        async def run(identity: str, driver: MemoryDriver, scope: anyio.CancelScope) -> None:
            with scope:
                async with driver:
                    elector = ha.Elector(
                        driver,
                        "/svc",
                        identity,
                        timing=timing,
                        journal=str(workdir / f"{identity}.jsonl"),
                    )
                    live[identity] = (driver, elector, scope)
                    await elector.run(Idle())

        def start(identity: str) -> None:
            driver = MemoryDriver(cluster, session_timeout=0.3)
            tg.start_soon(run, identity, driver, anyio.CancelScope())

        for name in "abc":
            start(name)
        await wait_for(lambda: len(live) == 3)
        for round_no in range(4):
            await wait_for(settled)
            [name] = actives()
            driver, elector, scope = live.pop(name)
            if round_no % 2 == 0:
                elector.quit()
            else:
                await faults(driver).crash()
                scope.cancel()
            await wait_for(lambda: len(actives()) == 1)
            start(name)
            await wait_for(lambda name=name: name in live)
        await wait_for(settled)
        for _, elector, _ in live.values():
            elector.quit()
    MemoryCluster.drop(cluster)
    return 4


def test_journals_of_real_electors(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    failovers = anyio.run(_real_run, tmp_path)
    report = analyze(spark, [str(tmp_path / "*.jsonl")])
    [s] = report.summary.to_dict("records")
    assert report.malformed == 0
    assert report.overlap_count == 0
    assert s["epoch_violations"] == 0
    assert s["identities"] == 3
    assert s["intervals"] == failovers + 1
    assert s["failovers"] == failovers
    assert s["last_epoch"] >= failovers + 1
    assert 0 < s["availability"] <= 1


# --- scale ---------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_ten_million_events(spark, tmp_path: Path, request: pytest.FixtureRequest) -> None:  # type: ignore[no-untyped-def]
    # About 30 s to generate (1.4 GB of JSON) and 1-3 min to analyze on 2 cores: run it
    # with `-m slow` or HA_SLOW=1.
    if "slow" not in (request.config.getoption("markexpr") or "") and not os.environ.get("HA_SLOW"):
        pytest.skip("10 million events take minutes: select with -m slow or HA_SLOW=1")
    truth = generate_journal(tmp_path / "big", events=10_000_000, elections=8, overlaps=5, seed=3)
    report = analyze(spark, [str(tmp_path / "big")])
    assert report.events == truth.events >= 10_000_000
    assert report.overlap_count == 5
    found = sorted(
        (o["election"], o["first"], o["second"]) for o in report.overlaps.to_dict("records")
    )
    assert found == sorted((o.election, o.first, o.second) for o in truth.overlaps)
    for s in report.summary.to_dict("records"):
        assert s["failovers"] == truth.failovers[s["election"]]
    print(f"\n10M events: {report.seconds:.1f} s, {report.events_per_second:,.0f} events/s")


def test_the_interval_analysis_is_also_a_registered_pipeline(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from ha.pipeline import get_pipeline
    from ha.pipeline.commit import output_digest, read_output, write_batch

    path = _write(tmp_path / "j.jsonl", HAND)
    spec = get_pipeline("journal.intervals")
    params = spec.check_params({"journals": path})
    [batch] = spec.plan_batches(params)
    for out in ("a", "b"):
        write_batch(spec(spark, params, batch), tmp_path / out, 0, sort_by=spec.sort_by)
    assert output_digest(tmp_path / "a") == output_digest(tmp_path / "b")
    rows = read_output(spark, tmp_path / "a", order_by=["election", "start"]).collect()
    assert [(r.identity, r.kind, r.gap) for r in rows] == [
        ("x", "first", None),
        ("y", "failover", 2.5),
        ("x", "failover", 0.25),
        ("p", "first", None),
    ]
