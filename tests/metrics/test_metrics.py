"""Metrics: the text exposition parsed by prometheus_client's parser, and real electors on
sqlite and ZooKeeper measured through a handover and a failover (asyncio and trio)."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any

import anyio
import pytest

from ha.election.elector import Elector
from ha.election.history import read_history
from ha.election.machine import Phase, State
from ha.election.nodes import ElectionNodes
from ha.election.reporting import FencingStatistics
from ha.election.timing import Backoff, Timing
from ha.metrics import BackendMetrics, ElectorMetrics, JobManagerMetrics, Registry, cause_label
from ha.testing import History, Recorder, check_history, faults
from tests.support.harness import wait_for
from tests.support.metrics import Samples, parse, total, value

# --- the registry and its exposition ---------------------------------------------------------


def test_the_exposition_parses_with_every_kind_and_odd_label_values() -> None:
    registry = Registry()
    c = registry.counter("x_events_total", 'help with "quotes" and \\ and\nnewline', ("what",))
    c.labels(what='a "b"\\c\nd').inc(2)
    g = registry.gauge("x_level", "a gauge", ("k",))
    g.labels(k="set").set(-1.5)
    g.set_function(lambda: math.inf, k="read")
    g.set_function(lambda: None, k="absent")
    h = registry.histogram("x_seconds", "a histogram", (), buckets=(0.1, 1.0))
    for v in (0.05, 0.1, 0.5, 7.0):
        h.labels().observe(v)
    samples = parse(registry.render())
    assert value(samples, "x_events_total", what='a "b"\\c\nd') == 2
    assert value(samples, "x_level", k="set") == -1.5
    assert value(samples, "x_level", k="read") == math.inf
    assert not [k for k in samples if k[1] == (("k", "absent"),)]
    assert value(samples, "x_seconds_bucket", le="0.1") == 2  # le is inclusive
    assert value(samples, "x_seconds_bucket", le="1.0") == 3
    assert value(samples, "x_seconds_bucket", le="+Inf") == 4
    assert value(samples, "x_seconds_count") == 4
    assert value(samples, "x_seconds_sum") == pytest.approx(7.65)


def test_a_registry_refuses_a_clash_and_shares_a_twin() -> None:
    registry = Registry()
    first = registry.counter("y_total", "one", ("a",))
    assert registry.counter("y_total", "again", ("a",)) is first
    with pytest.raises(ValueError, match="registered differently"):
        registry.gauge("y_total", "clash", ("a",))
    with pytest.raises(ValueError, match="takes labels"):
        first.labels(b="x")
    with pytest.raises(ValueError, match="_total"):
        registry.counter("y", "no suffix")


def test_causes_lose_their_variable_parts() -> None:
    assert cause_label("behind 'host-a'") == "behind"
    assert cause_label("no answer in 3.5s") == "no answer in Ns"
    assert cause_label("join failed: NoNode /x/n") == "join failed"
    assert cause_label("won the election") == "won the election"


def test_job_manager_events_are_counted_and_handed_on() -> None:
    registry = Registry()
    seen: list[str] = []
    sink = JobManagerMetrics(registry).sink("jm-1", lambda name, fields: seen.append(name))
    sink("recovered", {"jobs": ["j1", "j2"]})
    sink("batch_committed", {})
    sink("batch_committed", {})
    sink("batch_failed", {})
    assert (
        value(parse(registry.render()), "ha_jobmanager_attempt_deaths_total", identity="jm-1") == 0
    )
    sink("attempt_died", {"job": "j1", "deaths": 1, "batch": 3})
    sink("job_finished", {"outcome": "succeeded"})
    samples = parse(registry.render())
    assert value(samples, "ha_jobmanager_attempt_deaths_total", identity="jm-1") == 1
    assert value(samples, "ha_jobmanager_batches_total", identity="jm-1", outcome="committed") == 2
    assert value(samples, "ha_jobmanager_batches_total", identity="jm-1", outcome="failed") == 1
    assert value(samples, "ha_jobmanager_batches_total", identity="jm-1", outcome="cancelled") == 0
    assert value(samples, "ha_jobmanager_recoveries_total", identity="jm-1") == 1
    assert value(samples, "ha_jobmanager_recovered_jobs_total", identity="jm-1") == 2
    assert (
        value(samples, "ha_jobmanager_jobs_total", identity="jm-1", event="finished_succeeded") == 1
    )
    assert seen == [
        "recovered",
        "batch_committed",
        "batch_committed",
        "batch_failed",
        "attempt_died",
        "job_finished",
    ]


# --- real electors -----------------------------------------------------------------------------


@pytest.fixture(params=["sqlite", pytest.param("zookeeper", marks=pytest.mark.zookeeper)])
def real_backend(request: pytest.FixtureRequest) -> Any:
    return request.getfixturevalue(f"{request.param}_backend")


class Member:
    """One elector with its own driver, registry and metrics."""

    def __init__(
        self, driver: Any, name: str, history: History, timing: Timing | None = None
    ) -> None:
        self.driver = driver
        self.registry = Registry()
        self.metrics = ElectorMetrics(self.registry)
        BackendMetrics(self.registry).measure(driver)
        self.elector = Elector(driver, "/metrics", name, timing=timing)
        self.elector.add_listener(history.transition)  # the safety verdict, from outside
        self.recorder = Recorder(name, history)
        self.contender = self.metrics.watch(self.elector, self.recorder)
        self.scope = anyio.CancelScope()

    async def run(self) -> None:
        with self.scope:
            await self.elector.run(self.contender)

    def samples(self) -> Samples:
        return parse(self.registry.render())

    def watches(self, leader: Member) -> bool:
        """This standby watches ``leader``'s node and breadcrumb, as its leader's."""
        machine, theirs = self.elector._machine, leader.elector._machine
        return machine.phase is Phase.STANDBY and machine.below == (theirs.node,)


pytestmark = pytest.mark.anyio


async def test_failover_and_handover_are_measured_by_the_successor(real_backend: Any) -> None:
    history = History()
    async with (
        real_backend.driver() as da,
        real_backend.driver() as db,
        real_backend.driver() as dc,
    ):
        a, b, c = (Member(d, n, history) for d, n in ((da, "a"), (db, "b"), (dc, "c")))
        async with anyio.create_task_group() as tg:
            tg.start_soon(a.run)
            lease_a = await a.elector.wait_active()
            tg.start_soon(b.run)
            await b.elector.wait_state(State.STANDBY)
            tg.start_soon(c.run)
            await c.elector.wait_state(State.STANDBY)

            s = a.samples()
            labels = {"election": "/metrics", "identity": "a"}
            assert value(s, "ha_elector_is_leader", **labels) == 1
            assert value(s, "ha_elector_epoch", **labels) == lease_a.epoch
            assert value(s, "ha_elector_state", **labels, state="active") == 1
            assert value(s, "ha_elector_state", **labels, state="standby") == 0
            assert value(s, "ha_elector_connected", **labels) == 1
            assert 0 <= value(s, "ha_elector_last_contact_age_seconds", **labels) < 60
            created = value(
                s,
                "ha_backend_operation_seconds_count",
                backend=da.capabilities.name,
                op="transaction",
            )
            assert created >= 1  # the join

            # a crashes: b takes over after fencing a's breadcrumb (a's work ends with its
            # process, at the crash: b may act before the cancellation below reaches it)
            history.add("a", "crash")
            await faults(da).crash()
            a.scope.cancel()  # its work ends with its process
            lease_b = await b.elector.wait_active()
            s = b.samples()
            labels = {"election": "/metrics", "identity": "b"}
            assert value(s, "ha_elector_fence_attempts_total", **labels) == 1
            assert value(s, "ha_elector_fence_failures_total", **labels) == 0
            assert value(s, "ha_elector_takeover_seconds_count", **labels, kind="failover") == 1
            assert value(s, "ha_elector_epoch", **labels) == lease_b.epoch > lease_a.epoch
            took_over = {**labels, "from": "standby", "to": "active"}
            assert total(s, "ha_elector_transitions_total", **took_over) == 1

            # b leaves gracefully: c takes over without fencing. c first re-reads the queue to
            # watch b as its leader (b announced itself); a leader gone during that read is
            # learnt from the read, not from an event, and has no start to measure from
            await wait_for(lambda: c.watches(b), 20)
            b.elector.quit()
            lease_c = await c.elector.wait_active()
            s = c.samples()
            labels = {"election": "/metrics", "identity": "c"}
            assert value(s, "ha_elector_fence_attempts_total", **labels) == 0
            assert value(s, "ha_elector_takeover_seconds_count", **labels, kind="handover") == 1
            assert (
                "ha_elector_takeover_seconds_count",
                tuple(sorted({**labels, "kind": "failover"}.items())),
            ) not in s
            assert lease_c.epoch > lease_b.epoch
            c.elector.quit()
    check_history(history)


@dataclass(frozen=True)
class Refusal:
    """One refused fence as the log said it, and what the statistics and metrics said then."""

    count: int  # "refused (N in a row)"
    delay: float  # "next try in S"
    statistics: FencingStatistics | None
    in_a_row: float
    next_try: float


class Refusals(logging.Handler):
    """Reads ``member``'s statistics and metrics at the moment its elector logs a refusal."""

    def __init__(self, member: Member) -> None:
        super().__init__()
        self.member = member
        self.seen: list[Refusal] = []

    def emit(self, record: logging.LogRecord) -> None:
        if "refused" not in record.msg or not isinstance(record.args, tuple):
            return
        _path, _old, count, _error, delay = record.args
        labels = {"election": "/metrics", "identity": self.member.elector.identity.decode()}
        statistics = self.member.elector.statistics().fencing
        s = self.member.samples()
        self.seen.append(
            Refusal(
                int(count),
                float(delay),
                statistics,
                value(s, "ha_elector_fence_refusals_in_a_row", **labels),
                value(s, "ha_elector_fence_next_try_seconds", **labels),
            )
        )


async def test_refused_fences_go_on_past_max_retries_shown_alike_everywhere(
    real_backend: Any,
) -> None:
    """Issue 26, item 6: refused fences never end the election (the standby gave up after
    max_retries, leaving no active and no standby); each is tried again after the fence
    backoff, which grows to its cap; and the count and the next try are the same in the log,
    the statistics (ha status' member note), the metrics and the history (the log said one
    more than ha status)."""
    history = History()
    backoff = Backoff(initial=0.02, maximum=0.08)
    timing = Timing(fence_backoff=backoff, max_retries=2)
    refusals = 8  # the old bound: max_retries + 1 = 3 refusals, then fatal
    async with real_backend.driver() as da, real_backend.driver() as db:
        a, b = Member(da, "a", history), Member(db, "b", history, timing)
        handler = Refusals(b)
        logger = logging.getLogger("ha.elector")
        logger.addHandler(handler)
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(a.run)
                await a.elector.wait_active()
                tg.start_soon(b.run)
                await b.elector.wait_state(State.STANDBY)
                b.recorder.refuse_fence = refusals
                history.add("a", "crash")
                await faults(da).crash()
                a.scope.cancel()
                await b.elector.wait_active()
                s = b.samples()
                record = await read_history(db, ElectionNodes("/metrics"))
                b.elector.quit()
        finally:
            logger.removeHandler(handler)
    check_history(history)
    assert [r.count for r in handler.seen] == list(range(1, refusals + 1))
    for r in handler.seen:
        assert r.statistics is not None and r.statistics.failures == r.count == r.in_a_row
        assert r.statistics.next_try_in is not None
        assert r.next_try <= r.statistics.next_try_in <= r.delay  # read in that order
        # the fence backoff's delay for this count: doubling, capped, jittered downwards
        base = min(backoff.maximum, backoff.initial * backoff.multiplier ** (r.count - 1))
        assert base * (1 - backoff.jitter) <= r.delay <= base
    labels = {"election": "/metrics", "identity": "b"}
    assert value(s, "ha_elector_fence_attempts_total", **labels) == refusals + 1
    assert value(s, "ha_elector_fence_failures_total", **labels) == refusals
    assert value(s, "ha_elector_fence_refusals_in_a_row", **labels) == 0
    next_try = ("ha_elector_fence_next_try_seconds", tuple(sorted(labels.items())))
    assert next_try not in s  # nothing refused any more
    assert record is not None and record[0].fence_failure is not None
    assert record[0].fence_failure.count == refusals
