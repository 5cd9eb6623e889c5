"""The stores on a driver: a proxy driver, the layout, a checkpoint, the store tests' driver
fixtures, and the model world of the deposed-leader property (a leader deposed never writes)."""

from __future__ import annotations

import contextlib
import copy
import itertools
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st

from ha.drivers.base import Check, Driver, Op, Stat
from ha.election.lease import Lease
from ha.election.names import Breadcrumb, ticket_for
from ha.election.nodes import ElectionNodes
from ha.errors import (
    Fenced,
    NodeExists,
    NoNode,
    SessionExpired,
)
from ha.stores import (
    CheckpointIdCounter,
    CheckpointStore,
    CompletedCheckpoint,
    ExecutionPlanStore,
    JobOutcome,
    JobResult,
    JobResultStore,
    Layout,
    MemoryBlobStore,
    RunningJobsRegistry,
    RunStatus,
    Stores,
)

ELECTION = "/ha-test/election"


LAYOUT = Layout("c1")


class FenceLog:
    """Counts report_fenced() calls of the leases it made."""

    def __init__(self) -> None:
        self.count = 0

    def report(self) -> None:
        self.count += 1


async def win(driver: Driver, election: str = ELECTION, log: FenceLog | None = None) -> Lease:
    """Become the leader as the elector does once every older leader is gone: the queue's
    nodes are deleted (their leaders deposed: their fenced writes fail from now on), then ours
    joins the queue, first; its creation order is our epoch."""
    nodes = ElectionNodes(election)
    for entry in await nodes.entries(driver):
        with contextlib.suppress(NoNode):
            await driver.delete(nodes.node(entry.name))
    ticket = ticket_for(b"test", secrets.token_hex(4))
    node = nodes.node(await nodes.join(driver, ticket, Breadcrumb(b"test")))
    _, stat = await driver.get(node)
    return Lease(
        election=election,
        identity=b"test",
        epoch=stat.created,
        session_id=driver.session_id or 0,
        node=node,
        _on_fenced=log.report if log else (lambda: None),
    )


class ProxyDriver(Driver):
    """Delegates to a real driver; subclasses intercept calls (fault injection, recording)."""

    def __init__(self, inner: Driver) -> None:
        super().__init__()
        self.inner = inner
        self.capabilities = inner.capabilities

    @classmethod
    def from_url(cls, url: str, **options: Any) -> ProxyDriver:
        raise NotImplementedError

    async def start(self) -> None:
        await self.inner.start()

    async def aclose(self) -> None:
        await self.inner.aclose()

    @property
    def session_id(self) -> int | None:
        return self.inner.session_id

    @property
    def session_timeout(self) -> float:
        return self.inner.session_timeout

    @property
    def last_contact(self) -> float:
        return self.inner.last_contact

    @property
    def connected(self) -> bool:
        return self.inner.connected

    async def before(self, name: str, arg: object) -> None:
        """Hook called before every operation."""

    async def create(
        self,
        path: str,
        data: bytes = b"",
        *,
        ephemeral: bool = False,
        sequential: bool = False,
        makepath: bool = False,
    ) -> str:
        await self.before("create", path)
        return await self.inner.create(
            path, data, ephemeral=ephemeral, sequential=sequential, makepath=makepath
        )

    async def get(self, path: str) -> tuple[bytes, Stat]:
        await self.before("get", path)
        return await self.inner.get(path)

    async def exists(self, path: str) -> Stat | None:
        await self.before("exists", path)
        return await self.inner.exists(path)

    async def set(self, path: str, data: bytes, version: int = -1) -> Stat:
        await self.before("set", path)
        return await self.inner.set(path, data, version)

    async def delete(self, path: str, version: int = -1, *, recursive: bool = False) -> None:
        await self.before("delete", path)
        await self.inner.delete(path, version, recursive=recursive)

    async def children(self, path: str) -> list[str]:
        await self.before("children", path)
        return await self.inner.children(path)

    async def transaction(self, ops: Sequence[Op]) -> list[str | Stat | None]:
        await self.before("transaction", ops)
        return await self.inner.transaction(ops)


@pytest.fixture
async def driver(backend: Any) -> AsyncIterator[Driver]:
    async with backend.driver() as d:
        yield d


@pytest.fixture
async def other(backend: Any) -> AsyncIterator[Driver]:
    """A second process's driver on the same backend."""
    async with backend.driver() as d:
        yield d


def files_under(directory: Path) -> list[Path]:
    return sorted(p for p in directory.rglob("*") if p.is_file())


def checkpoint(cid: int, job: str = "job1") -> CompletedCheckpoint:
    return CompletedCheckpoint(job, cid, f"meta-{cid}".encode(), timestamp=1000.0 + cid)


JOBS = ("j0", "j1")


RETAINED = 2


# far beyond any stall of a loaded machine during one example (ZooKeeper caps it at 20 s)
SESSION_TIMEOUT = 20.0


_examples = itertools.count()


@dataclass
class Model:
    results: dict[str, bool] = field(default_factory=dict)  # job -> clean
    runs: dict[str, str] = field(default_factory=dict)
    plans: dict[str, tuple[bytes, frozenset[str]]] = field(default_factory=dict)
    checkpoints: dict[str, dict[int, tuple[bytes, frozenset[str]]]] = field(
        default_factory=lambda: {j: {} for j in JOBS}
    )
    counters: dict[str, int] = field(default_factory=lambda: {j: 1 for j in JOBS})


class Outcome:
    """What the model says an operation does: its result, or its error, and its atomic steps."""

    def __init__(self, start: Model) -> None:
        self.states = [start]
        self.result: Any = None
        self.error: type[Exception] | None = None

    def step(self) -> Model:
        state = copy.deepcopy(self.states[-1])
        self.states.append(state)
        return state

    @property
    def final(self) -> Model:
        return self.states[-1]


def simulate(model: Model, owner: str, op: tuple[Any, ...]) -> Outcome:
    out = Outcome(model)
    kind, *args = op
    if kind == "result_dirty":
        (job,) = args
        if job in model.results:
            out.error = NodeExists
        else:
            out.step().results[job] = False
    elif kind == "result_clean":
        (job,) = args
        if job not in model.results:
            out.error = NoNode
        else:
            out.step().results[job] = True
    elif kind == "run_set":
        job, status = args
        out.step().runs[job] = status
    elif kind == "run_clear":
        (job,) = args
        out.step().runs.pop(job, None)
    elif kind == "plan_put":
        job, n = args
        holders = model.plans[job][1] if job in model.plans else frozenset({owner})
        out.step().plans[job] = (b"plan-%d" % n, holders)
    elif kind == "plan_remove":
        (job,) = args
        out.result = True
        if job in model.plans:
            payload, holders = model.plans[job]
            state = out.step()
            if holders - {owner}:
                state.plans[job] = (payload, holders - {owner})
                out.result = False
            else:
                del state.plans[job]
    elif kind == "plan_recover":
        (job,) = args
        if job not in model.plans:
            out.error = NoNode
        else:
            payload, holders = model.plans[job]
            out.step().plans[job] = (payload, holders | {owner})
            out.result = payload
    elif kind == "checkpoint_add":
        job, n = args
        ids = sorted(model.checkpoints[job])
        cid = (ids[-1] if ids else 0) + 1
        out.step().checkpoints[job][cid] = (b"ck-%d" % n, frozenset({owner}))
        subsumed = []
        for old in [*ids, cid][:-RETAINED]:
            state = out.step()
            payload, holders = state.checkpoints[job][old]
            if holders - {owner}:
                state.checkpoints[job][old] = (payload, holders - {owner})
            else:
                del state.checkpoints[job][old]
                subsumed.append(old)
        out.result = subsumed
    elif kind == "checkpoint_recover":
        (job,) = args
        for cid in sorted(model.checkpoints[job]):
            state = out.step()
            payload, holders = state.checkpoints[job][cid]
            state.checkpoints[job][cid] = (payload, holders | {owner})
        out.result = sorted(model.checkpoints[job])
    elif kind == "counter":
        (job,) = args
        out.result = model.counters[job]
        out.step().counters[job] += 1
    elif kind == "close":
        for job, (payload, holders) in model.plans.items():
            if owner in holders:
                out.step().plans[job] = (payload, holders - {owner})
        for job, found in model.checkpoints.items():
            for cid, (payload, holders) in found.items():
                if owner in holders:
                    out.step().checkpoints[job][cid] = (payload, holders - {owner})
    else:  # pragma: no cover
        raise AssertionError(kind)
    return out


class Recorder(ProxyDriver):
    """One process's driver: checks every write that lands, and trips the failover."""

    def __init__(self, inner: Driver, world: World) -> None:
        super().__init__(inner)
        self.world = world

    async def before(self, name: str, arg: object) -> None:
        await self.world.tick()

    async def transaction(self, ops: Sequence[Op]) -> list[str | Stat | None]:
        await self.before("transaction", ops)
        result = await self.inner.transaction(ops)
        fence = ops[0]
        assert isinstance(fence, Check) and fence.path.startswith(self.world.queue), (
            f"an unfenced transaction landed: {ops}"
        )
        assert fence.path == self.world.current_node, f"a deposed leader's write landed: {ops}"
        return result

    async def create(
        self,
        path: str,
        data: bytes = b"",
        *,
        ephemeral: bool = False,
        sequential: bool = False,
        makepath: bool = False,
    ) -> str:
        raise AssertionError(f"unfenced create of {path}")

    async def set(self, path: str, data: bytes, version: int = -1) -> Stat:
        raise AssertionError(f"unfenced set of {path}")

    async def delete(self, path: str, version: int = -1, *, recursive: bool = False) -> None:
        # the one unfenced write: dropping a lock of our own
        parts = path.rsplit("/", 2)
        assert parts[1] == "locks" and parts[2] in self.world.owners, f"unfenced delete of {path}"
        await super().delete(path, version, recursive=recursive)


class World:
    def __init__(self, drivers: list[Driver], cluster_id: str, election: str) -> None:
        self.raw = drivers
        self.procs = [Recorder(d, self) for d in drivers]
        self.cluster_id = cluster_id
        self.election = election
        self.queue = f"{election}/n/"
        self.blobs = MemoryBlobStore()
        self.leases: list[Lease] = []
        self.stores: list[Stores] = []
        self.owners: list[str] = []
        self.current_node = ""
        self.trip_in: int | None = None  # backend calls left before the failover
        self.model = Model()

    async def failover(self) -> None:
        proc = len(self.leases) % 2  # the processes take turns
        lease = await win(self.raw[proc], self.election)
        self.current_node = lease.node
        owner = f"o{len(self.leases)}"
        self.leases.append(lease)
        self.owners.append(owner)
        self.stores.append(
            Stores(
                self.procs[proc],
                self.cluster_id,
                blobs=self.blobs,
                lease=lease,
                max_retained_checkpoints=RETAINED,
                lock_owner=owner,
            )
        )

    async def tick(self) -> None:
        if self.trip_in is not None:
            if self.trip_in == 0:
                self.trip_in = None
                await self.failover()
            else:
                self.trip_in -= 1

    async def run(self, stores: Stores, op: tuple[Any, ...]) -> Any:
        kind, *args = op
        if kind == "result_dirty":
            return await stores.job_results.create_dirty(JobResult(args[0], JobOutcome.SUCCEEDED))
        if kind == "result_clean":
            return await stores.job_results.mark_clean(args[0])
        if kind == "run_set":
            return await stores.running_jobs.set_status(args[0], RunStatus(args[1]))
        if kind == "run_clear":
            return await stores.running_jobs.clear(args[0])
        if kind == "plan_put":
            return await stores.execution_plans.put(args[0], b"plan-%d" % args[1])
        if kind == "plan_remove":
            return await stores.execution_plans.remove(args[0])
        if kind == "plan_recover":
            return await stores.execution_plans.recover(args[0])
        if kind == "checkpoint_add":
            job, n = args
            ids = sorted(self.model.checkpoints[job])
            cid = (ids[-1] if ids else 0) + 1
            return await stores.checkpoints(job).add(CompletedCheckpoint(job, cid, b"ck-%d" % n))
        if kind == "checkpoint_recover":
            return [c.checkpoint_id for c in await stores.checkpoints(args[0]).recover()]
        if kind == "counter":
            return await stores.checkpoint_ids(args[0]).get_and_increment()
        if kind == "close":
            return await stores.close()
        raise AssertionError(kind)  # pragma: no cover

    async def observe(self, driver: Driver) -> Model:
        """What the backend holds, read through read-only stores on ``driver``."""
        from ha.stores import Layout

        layout = Layout(self.cluster_id)
        seen = Model()
        for entry in await JobResultStore(driver, layout).entries():
            seen.results[entry.result.job_id] = entry.clean
        for job, status in (await RunningJobsRegistry(driver, layout).statuses()).items():
            seen.runs[job] = status.value
        plans = ExecutionPlanStore(driver, layout, self.blobs)
        for job in await plans.job_ids():
            payload = await plans.get(job)
            assert payload is not None
            locks = await driver.children(f"{plans.handles.path(job)}/locks")
            seen.plans[job] = (payload, frozenset(locks))
        for job in JOBS:
            store = CheckpointStore(driver, layout, job, self.blobs)
            for ck in await store.checkpoints():
                name = store.handles.path(f"{ck.checkpoint_id:019d}")
                locks = await driver.children(f"{name}/locks")
                seen.checkpoints[job][ck.checkpoint_id] = (ck.metadata, frozenset(locks))
            seen.counters[job] = await CheckpointIdCounter(driver, layout, job).get()
        return seen

    async def referenced_blobs(self, driver: Driver) -> set[str]:
        from ha.stores import Layout

        layout = Layout(self.cluster_id)
        handles = [ExecutionPlanStore(driver, layout, self.blobs).handles]
        handles += [CheckpointStore(driver, layout, j, self.blobs).handles for j in JOBS]
        keys = set()
        for store in handles:
            for name in await store.names():
                keys.add((await store.handle(name)).blob.key)
        return keys


job = st.sampled_from(JOBS)


ops = st.one_of(
    st.tuples(st.just("result_dirty"), job),
    st.tuples(st.just("result_clean"), job),
    st.tuples(st.just("run_set"), job, st.sampled_from([s.value for s in RunStatus])),
    st.tuples(st.just("run_clear"), job),
    st.tuples(st.just("plan_put"), job, st.integers(0, 9)),
    st.tuples(st.just("plan_remove"), job),
    st.tuples(st.just("plan_recover"), job),
    st.tuples(st.just("checkpoint_add"), job, st.integers(0, 9)),
    st.tuples(st.just("checkpoint_add"), job, st.integers(0, 9)),
    st.tuples(st.just("checkpoint_recover"), job),
    st.tuples(st.just("counter"), job),
    st.tuples(st.just("close")),
)


steps = st.lists(
    st.one_of(
        st.tuples(st.just("failover")),
        # who: 0 is the current leader, k > 0 the k-th most recent deposed one
        st.tuples(
            st.just("op"),
            st.sampled_from([0, 0, 0, 1, 2]),
            ops,
            st.none() | st.integers(0, 12),  # trip the failover before this backend call
        ),
    ),
    max_size=30,
)


PROPERTY = settings(
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


async def deposed_leaders_never_write(
    backend: Any,
    steps: list[tuple[Any, ...]],
    before_check: Callable[[World], Awaitable[None]] | None = None,
) -> None:
    n = next(_examples)
    long = {"session_timeout": SESSION_TIMEOUT}
    async with backend.driver(**long) as a, backend.driver(**long) as b:
        world = World([a, b], f"prop{n}", f"/prop-election-{n}")
        canaries = [f"/prop-alive-{n}/{i}" for i in range(2)]
        for driver, canary in zip((a, b), canaries, strict=True):
            await driver.create(canary, ephemeral=True, makepath=True)
        await world.failover()
        try:
            for step in steps:
                if step[0] == "failover":
                    await world.failover()
                    continue
                _, who, op, trip = step
                index = max(0, len(world.stores) - 1 - who)
                current = index == len(world.stores) - 1
                expected = simulate(world.model, world.owners[index], op)
                world.trip_in = trip if current else None
                before = len(world.leases)
                error: Exception | None = None
                result: Any = None
                try:
                    result = await world.run(world.stores[index], op)
                except (Fenced, NodeExists, NoNode) as exc:
                    error = exc
                tripped = len(world.leases) > before
                world.trip_in = None
                seen = await world.observe(a)

                if current and not tripped:
                    # the current leader's writes all land, as the model says
                    assert (
                        error is None
                        if expected.error is None
                        else isinstance(error, expected.error)
                    )
                    if expected.error is None:
                        assert result == expected.result, op
                    assert seen == expected.final, op
                elif current and error is None:
                    # deposed after its last write: it all landed
                    assert expected.error is None and result == expected.result, op
                    assert seen == expected.final, op
                elif current and isinstance(error, Fenced):
                    # deposed mid-way: some prefix of its atomic steps landed, nothing more
                    event("deposed in the middle of an operation")
                    assert seen in expected.states, (op, seen, expected.states)
                elif current:
                    assert expected.error is not None and isinstance(error, expected.error), op
                    assert seen == expected.states[0]
                elif op[0] == "close":
                    assert error is None and seen == expected.final  # dropping locks is allowed
                else:
                    # a deposed leader: refused (or a precondition failed first); nothing changed
                    assert error is not None or len(expected.states) == 1, (op, result)
                    event(f"deposed leader: {type(error).__name__ if error else 'no write'}")
                    if error is not None and not isinstance(error, Fenced):
                        assert expected.error is not None and isinstance(error, expected.error), op
                    assert seen == world.model, op
                world.model = seen

            # a removal a leader was deposed in the middle of leaves its entry marked for deletion
            # (pointer and payload): the current leader finishes it, as a job manager does
            leader = world.stores[-1]
            for handles in [
                leader.execution_plans.handles,
                *(leader.checkpoints(j).handles for j in JOBS),
            ]:
                await handles.cleanup_marked_for_deletion()
            if before_check is not None:
                await before_check(world)
            # nothing committed is lost: a fresh reader in a new session sees the same
            async with backend.driver() as reader:
                assert await world.observe(reader) == world.model
                # and no payload is leaked or lost
                assert await world.referenced_blobs(reader) == set(world.blobs.blobs)
        except (AssertionError, SessionExpired):
            await check_sessions(backend, canaries)  # a broken premise, named as such
            raise


async def check_sessions(backend: Any, canaries: list[str]) -> None:
    """AssertionError naming the processes whose session ended (their canary is gone)."""
    async with backend.driver() as reader:
        ended = [i for i, c in enumerate(canaries) if await reader.exists(c) is None]
    assert not ended, (
        f"the session of process {ended} ended during the example (its lease lapsed?): the "
        "property's premise is broken; its ephemeral nodes (locks, queue node) went with it"
    )
