"""Scenario tests of the fenced stores, on every backend, under asyncio and trio."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest

from ha.drivers.base import Driver, Op, Stat
from ha.errors import (
    BadVersion,
    ConfigurationError,
    ConnectionLost,
    CorruptData,
    Fenced,
    NodeExists,
    NoNode,
)
from ha.stores import (
    CheckpointIdCounter,
    CheckpointStore,
    ExecutionPlanStore,
    FileBlobStore,
    JobOutcome,
    JobResult,
    JobResultStore,
    MemoryBlobStore,
    PossiblyInconsistent,
    RunningJobsRegistry,
    RunStatus,
    StateHandleStore,
    Stores,
)
from ha.stores.blobs import BlobRef
from tests.support.stores import (
    LAYOUT,
    FenceLog,
    ProxyDriver,
    checkpoint,
    driver,
    files_under,
    other,
    win,
)

__all__ = ("driver", "other")  # fixtures

pytestmark = pytest.mark.anyio


# --- helpers (also used by test_stores_property) ----------------------------------------------


class LossyDriver(ProxyDriver):
    """The next transaction loses contact: before it reaches the backend, or after it applied."""

    def __init__(self, inner: Driver) -> None:
        super().__init__(inner)
        self.lose: str | None = None  # "before" | "after"

    async def transaction(self, ops: Sequence[Op]) -> list[str | Stat | None]:
        lose, self.lose = self.lose, None
        if lose == "before":
            raise ConnectionLost("injected: request lost")
        result = await self.inner.transaction(ops)
        if lose == "after":
            raise ConnectionLost("injected: reply lost")
        return result


@pytest.fixture
def blob_dir(tmp_path: Path) -> Path:
    return tmp_path / "blobs"  # tmp_path may hold the backend's own files (sqlite)


# --- job results ----------------------------------------------------------------------------


async def test_job_result_dirty_then_clean(driver: Driver) -> None:
    store = JobResultStore(driver, LAYOUT, lease=await win(driver))
    assert await store.get("j1") is None
    await store.create_dirty(JobResult("j1", JobOutcome.FAILED, {"error": "boom"}))
    await store.create_dirty(JobResult("j2", JobOutcome.SUCCEEDED))
    assert await store.has_dirty("j1") and not await store.has_clean("j1")
    assert [r.job_id for r in await store.dirty_results()] == ["j1", "j2"]

    await store.mark_clean("j1")
    await store.mark_clean("j1")  # idempotent
    entry = await store.get("j1")
    assert entry is not None and entry.clean
    assert entry.result == JobResult("j1", JobOutcome.FAILED, {"error": "boom"})
    assert [r.job_id for r in await store.dirty_results()] == ["j2"]
    assert await store.has_entry("j1") and await store.has_clean("j1")

    with pytest.raises(NodeExists):
        await store.create_dirty(JobResult("j1", JobOutcome.SUCCEEDED))
    with pytest.raises(NoNode):
        await store.mark_clean("nope")


async def test_job_result_read_only_store_refuses_writes(driver: Driver) -> None:
    store = JobResultStore(driver, LAYOUT)
    with pytest.raises(ConfigurationError, match="without a lease"):
        await store.create_dirty(JobResult("j1", JobOutcome.SUCCEEDED))
    with pytest.raises(ConfigurationError):
        JobResultStore(driver, LAYOUT)._path("../x")


async def test_job_result_survives_failover(driver: Driver, other: Driver) -> None:
    old = JobResultStore(driver, LAYOUT, lease=await win(driver))
    await old.create_dirty(JobResult("j1", JobOutcome.SUCCEEDED))
    new = JobResultStore(other, LAYOUT, lease=await win(other))
    assert [r.job_id for r in await new.dirty_results()] == ["j1"]
    with pytest.raises(Fenced):
        await old.mark_clean("j1")
    await new.mark_clean("j1")
    assert await new.dirty_results() == []


# --- running jobs ---------------------------------------------------------------------------


async def test_running_jobs_registry(driver: Driver) -> None:
    registry = RunningJobsRegistry(driver, LAYOUT, lease=await win(driver))
    assert await registry.status("j1") is None
    await registry.set_pending("j1")
    assert await registry.status("j1") is RunStatus.PENDING
    await registry.set_running("j1")
    await registry.set_running("j1")
    await registry.set_done("j2")
    assert await registry.statuses() == {"j1": RunStatus.RUNNING, "j2": RunStatus.DONE}
    await registry.clear("j1")
    await registry.clear("j1")
    assert await registry.statuses() == {"j2": RunStatus.DONE}


# --- fencing --------------------------------------------------------------------------------


async def test_deposed_leader_writes_nothing(driver: Driver, other: Driver, blob_dir: Path) -> None:
    log = FenceLog()
    old = Stores(driver, "c1", blobs=blob_dir, lease=await win(driver, log=log))
    await old.running_jobs.set_running("j1")
    await old.execution_plans.put("j1", b"plan-1")
    await old.checkpoints("j1").add(checkpoint(1, "j1"))
    assert await old.checkpoint_ids("j1").get_and_increment() == 1

    new = Stores(other, "c1", blobs=blob_dir, lease=await win(other))
    attempts = [
        old.running_jobs.set_done("j1"),
        old.running_jobs.clear("j1"),
        old.running_jobs.clear("absent"),
        old.job_results.create_dirty(JobResult("j1", JobOutcome.SUCCEEDED)),
        old.execution_plans.put("j1", b"plan-2"),
        old.execution_plans.put("j2", b"plan-2"),
        old.execution_plans.remove("j1"),
        old.execution_plans.recover("j1"),
        old.checkpoints("j1").add(checkpoint(2, "j1")),
        old.checkpoint_ids("j1").get_and_increment(),
        old.checkpoint_ids("j1").set_count(100),
        old.close_and_cleanup_all_data(),
    ]
    for attempt in attempts:
        with pytest.raises(Fenced):
            await attempt
    assert log.count == len(attempts)

    assert await new.running_jobs.statuses() == {"j1": RunStatus.RUNNING}
    assert await new.job_results.entries() == []
    assert await new.execution_plans.job_ids() == ["j1"]
    assert await new.execution_plans.get("j1") == b"plan-1"
    assert await new.checkpoints("j1").ids() == [1]
    assert await new.checkpoint_ids("j1").get_and_increment() == 2
    # the refused payloads were discarded: only plan-1 and checkpoint 1 remain on disk
    assert len(files_under(blob_dir / "c1")) == 2


async def test_queue_node_deleted_fences(driver: Driver) -> None:
    lease = await win(driver)
    registry = RunningJobsRegistry(driver, LAYOUT, lease=lease)
    await driver.delete(lease.node)
    with pytest.raises(Fenced):
        await registry.set_running("j1")
    assert await driver.exists(LAYOUT.running_jobs) is None  # no container either


async def test_writes_create_containers_inside_the_fence(driver: Driver) -> None:
    """A deposed leader does not even leave empty parent nodes behind."""
    lease = await win(driver)
    await win(driver)
    with pytest.raises(Fenced):
        await RunningJobsRegistry(driver, LAYOUT, lease=lease).set_running("j1")
    assert await driver.exists("/ha") is None


# --- execution plans ------------------------------------------------------------------------


async def test_execution_plans(driver: Driver) -> None:
    blobs = MemoryBlobStore()
    store = ExecutionPlanStore(driver, LAYOUT, blobs, lease=await win(driver))
    assert await store.get("j1") is None
    await store.put("j1", b"\x00plan one")
    await store.put("j2", b"plan two")
    assert await store.job_ids() == ["j1", "j2"]
    assert await store.get("j1") == b"\x00plan one"
    await store.put("j1", b"plan one, v2")  # replace: the old payload goes
    assert await store.get("j1") == b"plan one, v2"
    assert len(blobs.blobs) == 2
    assert await store.remove("j1")
    assert await store.job_ids() == ["j2"]
    assert await store.get("j1") is None
    assert len(blobs.blobs) == 1
    assert await store.remove("j1")  # absent: nothing to do
    with pytest.raises(NoNode):
        await store.recover("j1")


async def test_execution_plan_held_by_another_owner_is_not_removed(
    driver: Driver, other: Driver
) -> None:
    blobs = MemoryBlobStore()
    old = ExecutionPlanStore(driver, LAYOUT, blobs, lease=await win(driver), lock_owner="old")
    await old.put("j1", b"plan")
    new = ExecutionPlanStore(other, LAYOUT, blobs, lease=await win(other), lock_owner="new")
    assert await new.recover("j1") == b"plan"
    assert not await new.remove("j1")  # the old leader's lock pins it
    assert await new.job_ids() == ["j1"]
    assert await other.children(f"{LAYOUT.execution_plans}/j1/locks") == ["old"]
    await old.release("j1")  # not fenced: a deposed leader can let go
    assert await new.remove("j1")
    assert await new.job_ids() == [] and blobs.blobs == {}


async def test_locks_go_with_the_session(backend: Any, other: Driver) -> None:
    blobs = MemoryBlobStore()
    async with backend.driver() as first:
        old = ExecutionPlanStore(first, LAYOUT, blobs, lease=await win(first))
        await old.put("j1", b"plan")
    new = ExecutionPlanStore(other, LAYOUT, blobs, lease=await win(other))
    assert await new.remove("j1")


async def test_corrupt_plan_blob(driver: Driver) -> None:
    blobs = MemoryBlobStore()
    store = ExecutionPlanStore(driver, LAYOUT, blobs, lease=await win(driver))
    await store.put("j1", b"plan")
    (key,) = blobs.blobs
    blobs.blobs[key] = b"x" * len(blobs.blobs[key])
    with pytest.raises(CorruptData) as info:
        await store.get("j1")
    assert info.value.path == f"{LAYOUT.execution_plans}/j1"
    assert key in str(info.value)
    del blobs.blobs[key]
    with pytest.raises(CorruptData, match="missing"):
        await store.get("j1")


# --- checkpoints ----------------------------------------------------------------------------


async def test_checkpoints_keep_newest_n(driver: Driver) -> None:
    blobs = MemoryBlobStore()
    store = CheckpointStore(driver, LAYOUT, "job1", blobs, lease=await win(driver), max_retained=2)
    assert await store.latest() is None
    assert await store.add(checkpoint(1)) == []
    assert await store.add(checkpoint(2)) == []
    assert await store.add(checkpoint(5)) == [1]
    assert await store.ids() == [2, 5]
    assert await store.latest() == checkpoint(5)
    assert [c.checkpoint_id for c in await store.checkpoints()] == [2, 5]
    assert len(blobs.blobs) == 2  # checkpoint 1's metadata was discarded
    with pytest.raises(NodeExists):
        await store.add(checkpoint(5))
    with pytest.raises(ConfigurationError, match="older"):
        await store.add(checkpoint(3))
    with pytest.raises(ConfigurationError):
        await store.add(checkpoint(6, job="other"))
    with pytest.raises(ConfigurationError):
        CheckpointStore(driver, LAYOUT, "job1", blobs, max_retained=0)


async def test_checkpoints_recovered_by_new_leader(driver: Driver, other: Driver) -> None:
    blobs = MemoryBlobStore()
    old = CheckpointStore(driver, LAYOUT, "job1", blobs, lease=await win(driver), lock_owner="a")
    await old.add(checkpoint(1))
    await old.add(checkpoint(2))
    new = CheckpointStore(other, LAYOUT, "job1", blobs, lease=await win(other), lock_owner="b")
    assert [c.checkpoint_id for c in await new.recover()] == [2]
    with pytest.raises(Fenced):
        await old.add(checkpoint(3))
    # checkpoint 2 is held by the old leader too, so subsuming it waits for its release
    assert await new.add(checkpoint(3)) == []
    assert await new.ids() == [2, 3]
    await old.close()
    assert await new.add(checkpoint(4)) == [2, 3]
    assert await new.ids() == [4]


async def test_checkpoint_file_blobs(driver: Driver, blob_dir: Path) -> None:
    stores = Stores(
        driver, "c1", blobs=blob_dir, lease=await win(driver), max_retained_checkpoints=1
    )
    store = stores.checkpoints("job1")
    await store.add(checkpoint(1))
    await store.add(checkpoint(2))
    files = files_under(blob_dir)
    assert [p.parent.name for p in files] == ["0000000000000000002"]
    assert not [p for p in files if p.name.endswith(".tmp")]
    assert await store.latest() == checkpoint(2)


async def test_checkpoint_id_counter_monotonic_across_failover(
    driver: Driver, other: Driver
) -> None:
    old = CheckpointIdCounter(driver, LAYOUT, "job1", lease=await win(driver))
    assert await old.get() == 1
    assert [await old.get_and_increment() for _ in range(3)] == [1, 2, 3]
    new = CheckpointIdCounter(other, LAYOUT, "job1", lease=await win(other))
    with pytest.raises(Fenced):
        await old.get_and_increment()
    assert await new.get_and_increment() == 4
    await new.set_count(10)
    with pytest.raises(ConfigurationError):
        await new.set_count(5)
    assert await new.get_and_increment() == 10
    assert await CheckpointIdCounter(driver, LAYOUT, "job1").get() == 11


async def test_checkpoint_id_counter_concurrent_increments(driver: Driver) -> None:
    counter = CheckpointIdCounter(driver, LAYOUT, "job1", lease=await win(driver))
    got: list[int] = []

    async def take() -> None:
        for _ in range(3):
            got.append(await counter.get_and_increment())

    async with anyio.create_task_group() as tg:
        for _ in range(4):
            tg.start_soon(take)
    assert sorted(got) == list(range(1, 13))


async def test_checkpoint_counter_unknown_outcome_never_repeats(driver: Driver) -> None:
    lossy = LossyDriver(driver)
    counter = CheckpointIdCounter(lossy, LAYOUT, "job1", lease=await win(driver))
    assert await counter.get_and_increment() == 1
    lossy.lose = "after"
    with pytest.raises(ConnectionLost):
        await counter.get_and_increment()  # 2 was consumed, though we could not know
    lossy.lose = "before"
    with pytest.raises(ConnectionLost):
        await counter.get_and_increment()  # 3 was not
    assert await counter.get_and_increment() == 3


# --- state handles (Flink's addAndLock) -------------------------------------------------------


async def test_add_and_lock_layout(driver: Driver) -> None:
    blobs = MemoryBlobStore()
    root = LAYOUT.state("ns")
    store = StateHandleStore(driver, root, blobs, lease=await win(driver), lock_owner="me")
    handle = await store.add_and_lock("a", b"payload")
    assert await driver.children(f"{root}/a") == ["locks"]
    assert await driver.children(f"{root}/a/locks") == ["me"]
    lock_stat = await driver.exists(f"{root}/a/locks/me")
    assert lock_stat is not None and lock_stat.ephemeral_owner == driver.session_id
    assert await store.load(handle) == b"payload"
    assert await store.get("a") == b"payload"
    with pytest.raises(NodeExists):
        await store.add_and_lock("a", b"again")
    assert len(blobs.blobs) == 1  # the refused payload was never stored


async def test_add_and_lock_unknown_outcome_keeps_payload(driver: Driver) -> None:
    blobs = MemoryBlobStore()
    lossy = LossyDriver(driver)
    store = StateHandleStore(lossy, LAYOUT.state("ns"), blobs, lease=await win(driver))

    lossy.lose = "after"  # applied, but we cannot know
    with pytest.raises(PossiblyInconsistent) as info:
        await store.add_and_lock("a", b"one")
    assert info.value.blob in blobs.blobs
    assert isinstance(info.value, ConnectionLost)
    assert await store.get("a") == b"one"  # and the pointer is good

    lossy.lose = "before"  # not applied, and we cannot know either
    with pytest.raises(PossiblyInconsistent) as info:
        await store.add_and_lock("b", b"two")
    assert info.value.blob in blobs.blobs  # kept: only a reader can tell it is garbage
    assert not await store.contains("b")


async def test_add_and_lock_refused_discards_payload(driver: Driver, other: Driver) -> None:
    blobs = MemoryBlobStore()
    lease = await win(driver)
    store = StateHandleStore(driver, LAYOUT.state("ns"), blobs, lease=lease)
    await win(other)
    with pytest.raises(Fenced):
        await store.add_and_lock("a", b"late")
    assert blobs.blobs == {}


async def test_marked_for_deletion_is_cleaned_up(driver: Driver) -> None:
    blobs = MemoryBlobStore()
    root = LAYOUT.state("ns")
    store = StateHandleStore(driver, root, blobs, lease=await win(driver))
    await store.add_and_lock("a", b"one")
    await store.add_and_lock("b", b"two")
    # a crash after marking (the locks container is gone) and before the pointer's removal
    await store.release("a")
    await store.release("b")
    await driver.delete(f"{root}/a/locks")
    await driver.delete(f"{root}/b/locks")
    assert await store.names() == []
    with pytest.raises(NoNode):
        await store.get("a")
    with pytest.raises(NoNode):
        await store.get_and_lock("a")
    # a new add of a marked name finishes the old removal first
    await store.add_and_lock("b", b"three")
    assert await store.get("b") == b"three"
    assert await store.cleanup_marked_for_deletion() == ["a"]
    assert await driver.children(root) == ["b"]
    assert len(blobs.blobs) == 1


async def test_release_and_try_remove(driver: Driver) -> None:
    blobs = MemoryBlobStore()
    root = LAYOUT.state("ns")
    lease = await win(driver)
    mine = StateHandleStore(driver, root, blobs, lease=lease, lock_owner="mine")
    theirs = StateHandleStore(driver, root, blobs, lease=lease, lock_owner="theirs")
    await mine.add_and_lock("a", b"x")
    assert [h.name for h in await theirs.get_all_and_lock()] == ["a"]
    assert not await mine.release_and_try_remove("a")
    assert await driver.children(f"{root}/a/locks") == ["theirs"]
    assert await theirs.release_and_try_remove("a")
    assert await driver.exists(f"{root}/a") is None and blobs.blobs == {}
    await mine.release_all()


async def test_replace_state_handle(driver: Driver) -> None:
    blobs = MemoryBlobStore()
    store = StateHandleStore(driver, LAYOUT.state("ns"), blobs, lease=await win(driver))
    with pytest.raises(NoNode):
        await store.replace("a", b"x")
    first = await store.add_and_lock("a", b"one")
    second = await store.replace("a", b"two")
    assert second.version == first.version + 1
    assert await store.get("a") == b"two" and len(blobs.blobs) == 1


# --- corrupt data ---------------------------------------------------------------------------

CORRUPT = [
    b"\xff\xfe",
    b"not json",
    b"[1, 2]",
    b'{"format": "ha.job-result", "v": 2}',
    b'{"format": "something-else", "v": 1}',
]


@pytest.mark.parametrize("data", CORRUPT + [b""])
async def test_corrupt_job_result(driver: Driver, data: bytes) -> None:
    store = JobResultStore(driver, LAYOUT, lease=await win(driver))
    await store.create_dirty(JobResult("j1", JobOutcome.SUCCEEDED))
    path = f"{LAYOUT.job_results}/j1"
    await driver.set(path, data)
    for call in (store.get("j1"), store.dirty_results(), store.mark_clean("j1")):
        with pytest.raises(CorruptData) as info:
            await call
        assert info.value.path == path
    assert (await driver.get(path))[0] == data  # left as it is


async def test_unknown_values_are_corrupt(driver: Driver) -> None:
    lease = await win(driver)
    results = JobResultStore(driver, LAYOUT, lease=lease)
    await results.create_dirty(JobResult("j1", JobOutcome.SUCCEEDED))
    path = f"{LAYOUT.job_results}/j1"
    good = (await driver.get(path))[0]
    for bad in (
        good.replace(b'"dirty"', b'"half-clean"'),
        good.replace(b'"succeeded"', b'"exploded"'),
        good.replace(b'"job_id":"j1"', b'"job_id":"j9"'),
        good.replace(b'"detail":{}', b'"detail":[]'),
    ):
        await driver.set(path, bad)
        with pytest.raises(CorruptData, match="j1"):
            await results.get("j1")

    registry = RunningJobsRegistry(driver, LAYOUT, lease=lease)
    await registry.set_running("j1")
    await driver.set(
        f"{LAYOUT.running_jobs}/j1", b'{"format":"ha.running-job","v":1,"status":"PAUSED"}'
    )
    with pytest.raises(CorruptData, match="PAUSED"):
        await registry.status("j1")
    with pytest.raises(CorruptData):
        await registry.statuses()

    counter = CheckpointIdCounter(driver, LAYOUT, "job1", lease=lease)
    await counter.get_and_increment()
    await driver.set(
        LAYOUT.checkpoint_counter("job1"), b'{"format":"ha.checkpoint-counter","v":1,"next":true}'
    )
    with pytest.raises(CorruptData, match="next"):
        await counter.get_and_increment()


async def test_corrupt_state_handle_is_never_removed(driver: Driver) -> None:
    blobs = MemoryBlobStore()
    root = LAYOUT.state("ns")
    store = StateHandleStore(driver, root, blobs, lease=await win(driver))
    await store.add_and_lock("a", b"one")
    for bad in [
        *CORRUPT,
        b'{"format":"ha.state-handle","v":1,"blob":{"key":"../etc","size":1,"sha256":"x"}}',
    ]:
        await driver.set(f"{root}/a", bad)
        for call in (
            store.get("a"),
            store.replace("a", b"two"),
            store.release_and_try_remove("a"),
        ):
            with pytest.raises(CorruptData) as info:
                await call
            assert info.value.path == f"{root}/a"
        assert await store.names() == ["a"]
        assert (await driver.get(f"{root}/a"))[0] == bad
    assert len(blobs.blobs) == 1


async def test_corrupt_checkpoint_name(driver: Driver) -> None:
    store = CheckpointStore(driver, LAYOUT, "job1", MemoryBlobStore(), lease=await win(driver))
    await store.add(checkpoint(1))
    root = LAYOUT.completed_checkpoints("job1")
    await driver.create(f"{root}/latest")
    await driver.create(f"{root}/latest/locks")
    with pytest.raises(CorruptData, match="not a checkpoint id"):
        await store.latest()


async def test_checkpoint_blob_of_another_checkpoint(driver: Driver) -> None:
    blobs = MemoryBlobStore()
    store = CheckpointStore(driver, LAYOUT, "job1", blobs, lease=await win(driver), max_retained=2)
    await store.add(checkpoint(1))
    await store.add(checkpoint(2))
    root = LAYOUT.completed_checkpoints("job1")
    one = (await driver.get(f"{root}/0000000000000000001"))[0]
    await driver.set(f"{root}/0000000000000000002", one)
    with pytest.raises(CorruptData, match="checkpoint 1"):
        await store.latest()


# --- blobs ----------------------------------------------------------------------------------


async def test_file_blob_store(blob_dir: Path) -> None:
    store = FileBlobStore(blob_dir / "blobs")
    ref = await store.put("plans/j1", b"\x00" * 10_000)
    file = blob_dir / "blobs" / Path(*ref.key.split("/"))
    assert file.read_bytes() == b"\x00" * 10_000
    assert os.listdir(file.parent) == [file.name]  # no temporary file left
    assert await store.get(ref) == b"\x00" * 10_000

    file.write_bytes(b"\x01" * 10_000)
    with pytest.raises(CorruptData, match="digest") as info:
        await store.get(ref)
    assert info.value.path == str(file)
    file.write_bytes(b"short")
    with pytest.raises(CorruptData, match="bytes"):
        await store.get(ref)
    await store.delete(ref)
    await store.delete(ref)
    with pytest.raises(CorruptData, match="missing"):
        await store.get(ref)
    with pytest.raises(CorruptData, match="key"):
        await store.get(BlobRef("../../etc/passwd", 1, "0" * 64))
    with pytest.raises(ConfigurationError):
        await store.put("../up", b"x")

    await store.put("a", b"x")
    await store.delete_all()
    assert not (blob_dir / "blobs").exists()
    await store.delete_all()


# --- the whole set ----------------------------------------------------------------------------


async def fill(stores: Stores) -> None:
    await stores.job_results.create_dirty(JobResult("j1", JobOutcome.SUCCEEDED))
    await stores.running_jobs.set_running("j2")
    await stores.execution_plans.put("j2", b"plan")
    await stores.checkpoints("j2").add(checkpoint(1, "j2"))
    assert await stores.checkpoint_ids("j2").get_and_increment() == 1
    await stores.state_handles("misc").add_and_lock("x", b"state")


async def test_close_keeps_data(driver: Driver, other: Driver, blob_dir: Path) -> None:
    stores = Stores(driver, "c1", blobs=blob_dir, lease=await win(driver))
    await fill(stores)
    await stores.close()
    assert await driver.children(f"{LAYOUT.execution_plans}/j2/locks") == []
    new = Stores(other, "c1", blobs=blob_dir, lease=await win(other))
    assert await new.execution_plans.recover("j2") == b"plan"
    assert await new.checkpoints("j2").latest() == checkpoint(1, "j2")
    assert await new.checkpoint_ids("j2").get() == 2
    assert await new.state_handles("misc").get("x") == b"state"
    assert await new.job_results.has_dirty("j1")
    # and removing works at once: nothing pins the data any more
    assert await new.execution_plans.remove("j2")


async def test_close_and_cleanup_all_data(driver: Driver, other: Driver, blob_dir: Path) -> None:
    lease = await win(driver)
    await driver.create(f"{LAYOUT.root}/leader", b"not ours", makepath=True)
    stores = Stores(driver, "c1", blobs=blob_dir, lease=lease)
    await fill(stores)
    # another process holds a lock too: its ephemeral node goes as well
    reader = Stores(other, "c1", blobs=blob_dir, lease=lease, lock_owner="reader")
    await reader.execution_plans.recover("j2")
    await stores.close_and_cleanup_all_data()
    assert await driver.children(LAYOUT.root) == ["leader"]
    assert not (blob_dir / "c1").exists()
    assert (await driver.get(lease.node))[1].created == lease.epoch  # the election is not theirs


async def test_stores_need_valid_names(driver: Driver, blob_dir: Path) -> None:
    with pytest.raises(ConfigurationError):
        Stores(driver, "bad/cluster", blobs=blob_dir)
    stores = Stores(driver, "c1", blobs=blob_dir)
    with pytest.raises(ConfigurationError):
        stores.checkpoints("..")
    with pytest.raises(ConfigurationError):
        stores.state_handles("")


async def test_bad_version_is_not_swallowed(driver: Driver) -> None:
    lease = await win(driver)
    counter = CheckpointIdCounter(driver, LAYOUT, "job1", lease=lease)
    await counter.get_and_increment()

    class Racing(ProxyDriver):
        async def before(self, name: str, arg: object) -> None:
            if name == "transaction":  # someone writes between our read and our CAS, every time
                await self.inner.set(
                    LAYOUT.checkpoint_counter("job1"),
                    (await self.inner.get(LAYOUT.checkpoint_counter("job1")))[0],
                )

    racing = CheckpointIdCounter(Racing(driver), LAYOUT, "job1", lease=lease)
    with pytest.raises(BadVersion):
        await racing.get_and_increment()


async def test_remove_racing_a_replace_discards_the_right_payload(driver: Driver) -> None:
    blobs = MemoryBlobStore()
    lease = await win(driver)
    writer = StateHandleStore(driver, LAYOUT.state("ns"), blobs, lease=lease)
    await writer.add_and_lock("a", b"one")

    class ReplaceFirst(ProxyDriver):
        raced = False

        async def before(self, name: str, arg: object) -> None:
            if name == "transaction" and not self.raced:
                self.raced = True  # another task of the leader replaces it before our mark
                await writer.replace("a", b"two")

    remover = StateHandleStore(ReplaceFirst(driver), LAYOUT.state("ns"), blobs, lease=lease)
    remover.lock_owner = writer.lock_owner
    assert await remover.release_and_try_remove("a")
    assert await driver.exists(f"{LAYOUT.state('ns')}/a") is None
    assert blobs.blobs == {}
