"""A deposed leader's store writes never land and never destroy a newer leader's data.

Each test interleaves the deposed leader A with the new leader B (a greater epoch) through a
ProxyDriver hook on a real backend, then checks B's pointers and blobs directly.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ha.drivers.base import Driver
from ha.errors import Fenced
from ha.stores import (
    BlobStore,
    FileBlobStore,
    JobOutcome,
    JobResult,
    Layout,
    MemoryBlobStore,
    RunStatus,
    StateHandleStore,
    Stores,
)
from ha.stores.blobs import BlobRef
from tests.support.stores import ProxyDriver, checkpoint, driver, files_under, other, win

__all__ = ("driver", "other")  # fixtures

pytestmark = pytest.mark.anyio

LAYOUT = Layout("c1")


@pytest.fixture(params=["memory", "file"])
def blobs(request: pytest.FixtureRequest, tmp_path: Path) -> BlobStore:
    if request.param == "memory":
        return MemoryBlobStore()
    return FileBlobStore(tmp_path / "blobs")


async def raw_blob(blobs: BlobStore, ref: BlobRef) -> bytes | None:
    """The stored bytes of ``ref`` read straight from the blob store's storage, or None."""
    if isinstance(blobs, MemoryBlobStore):
        return blobs.blobs.get(ref.key)
    assert isinstance(blobs, FileBlobStore)
    file = blobs.directory.joinpath(*ref.key.split("/"))
    return file.read_bytes() if file.exists() else None


async def pointed_blob(driver: Driver, path: str) -> BlobRef:
    data, _ = await driver.get(path)
    doc = json.loads(data)
    assert doc["format"] == "ha.state-handle", f"{path} is no pointer: {data!r}"
    return BlobRef.from_json(path, doc["blob"])


class Hook(ProxyDriver):
    """Runs ``action`` once, just before the first ``name`` call on ``arg`` (or on anything)."""

    def __init__(self, inner: Driver, name: str, arg: object = None) -> None:
        super().__init__(inner)
        self.name, self.arg = name, arg
        self.action: Any = None
        self.fired = False

    async def before(self, name: str, arg: object) -> None:
        if name == self.name and (self.arg is None or arg == self.arg) and not self.fired:
            self.fired = True
            await self.action()


# --- state handles: removing an entry marked for deletion -------------------------------------


@pytest.mark.parametrize("how", ["cleanup", "add_and_lock"])
async def test_deposed_finish_removal_keeps_new_leaders_entry(
    driver: Driver, other: Driver, blobs: BlobStore, how: str
) -> None:
    root = LAYOUT.state("ns")
    path = f"{root}/x"
    lease_a = await win(driver)
    a = StateHandleStore(driver, root, blobs, lease=lease_a, lock_owner="a")
    await a.add_and_lock("x", b"old")
    # A crashed after marking x for deletion (locks container gone), before removing it
    await a.release("x")
    await driver.delete(f"{path}/locks")

    b = StateHandleStore(other, root, blobs, lease=await win(other), lock_owner="b")
    hooked = Hook(driver, "get", path)
    late = StateHandleStore(hooked, root, blobs, lease=lease_a, lock_owner="a")

    async def b_takes_x() -> None:
        # after A saw x marked, before A reads its pointer: B finishes the removal, re-adds x
        await b.add_and_lock("x", b"new")

    hooked.action = b_takes_x
    with pytest.raises(Fenced):
        if how == "cleanup":
            await late.cleanup_marked_for_deletion()
        else:
            await late.add_and_lock("x", b"late")
    assert hooked.fired

    ref = await pointed_blob(other, path)  # B's pointer is there ...
    assert await raw_blob(blobs, ref) == b"new"  # ... and so is the blob it names
    assert await b.get("x") == b"new"
    assert await other.children(f"{path}/locks") == ["b"]


async def test_cleanup_racing_a_readd_by_the_same_leader_keeps_the_entry(
    driver: Driver, blobs: BlobStore
) -> None:
    root = LAYOUT.state("ns")
    path = f"{root}/x"
    lease = await win(driver)
    a = StateHandleStore(driver, root, blobs, lease=lease)
    await a.add_and_lock("x", b"old")
    await a.release("x")
    await driver.delete(f"{path}/locks")
    hooked = Hook(driver, "get", path)
    cleaner = StateHandleStore(hooked, root, blobs, lease=lease, lock_owner=a.lock_owner)

    async def readd() -> None:
        await a.add_and_lock("x", b"new")

    hooked.action = readd
    assert await cleaner.cleanup_marked_for_deletion() == []  # x is live again: not removed
    assert await raw_blob(blobs, await pointed_blob(driver, path)) == b"new"


# --- Stores.close_and_cleanup_all_data ---------------------------------------------------------


async def fill(stores: Stores, job: str, plan: bytes) -> None:
    await stores.job_results.create_dirty(JobResult(job, JobOutcome.SUCCEEDED))
    await stores.running_jobs.set_running(job)
    await stores.execution_plans.put(job, plan)
    await stores.checkpoints(job).add(checkpoint(1, job))
    await stores.state_handles("misc").add_and_lock(job, plan)


async def check_b(b: Stores, other: Driver, blobs: BlobStore) -> None:
    """Everything B wrote is there: metadata, pointers, and the blobs they name."""
    assert await b.running_jobs.statuses() == {"jb": RunStatus.RUNNING}
    assert [e.result.job_id for e in await b.job_results.entries()] == ["jb"]
    assert await b.execution_plans.get("jb") == b"plan-b"
    assert await b.checkpoints("jb").latest() == checkpoint(1, "jb")
    assert await b.state_handles("misc").get("jb") == b"plan-b"
    for path in (
        f"{LAYOUT.execution_plans}/jb",
        f"{LAYOUT.completed_checkpoints('jb')}/{1:019d}",
        f"{LAYOUT.state('misc')}/jb",
    ):
        assert await raw_blob(blobs, await pointed_blob(other, path)) is not None, path


async def test_cleanup_of_a_leader_deposed_before_it_starts(
    driver: Driver, other: Driver, blobs: BlobStore
) -> None:
    lease_a = await win(driver)
    b = Stores(other, "c1", blobs=blobs, lease=await win(other), lock_owner="b")
    hooked = Hook(other, "transaction")
    b_hooked = Stores(hooked, "c1", blobs=blobs, lease=b.lease, lock_owner="b")
    a = Stores(driver, "c1", blobs=blobs, lease=lease_a)
    outcome: list[BaseException | None] = []

    async def a_cleans_up() -> None:
        # B's plan blob is stored, its pointer not yet written: A finds no metadata at all
        try:
            await a.close_and_cleanup_all_data()
            outcome.append(None)
        except Fenced as exc:
            outcome.append(exc)

    hooked.action = a_cleans_up
    await b_hooked.execution_plans.put("jb", b"plan-b")
    assert hooked.fired and isinstance(outcome[0], Fenced)
    await b.job_results.create_dirty(JobResult("jb", JobOutcome.SUCCEEDED))
    await b.running_jobs.set_running("jb")
    await b.checkpoints("jb").add(checkpoint(1, "jb"))
    await b.state_handles("misc").add_and_lock("jb", b"plan-b")
    await check_b(b, other, blobs)
    with pytest.raises(Fenced):  # and with B's data in place
        await a.close_and_cleanup_all_data()
    await check_b(b, other, blobs)


async def test_cleanup_of_a_leader_deposed_right_after_its_metadata_deletion(
    driver: Driver, other: Driver, blobs: BlobStore
) -> None:
    lease_a = await win(driver)
    a = Stores(driver, "c1", blobs=blobs, lease=lease_a, lock_owner="a")
    await fill(a, "ja", b"plan-a")
    a_refs = [
        await pointed_blob(driver, f"{LAYOUT.execution_plans}/ja"),
        await pointed_blob(driver, f"{LAYOUT.state('misc')}/ja"),
    ]

    class AfterLastCommit(ProxyDriver):
        """B takes over and writes its data once A's metadata deletion has committed."""

        b: Stores | None = None

        async def transaction(self, ops: Any) -> Any:
            result = await self.inner.transaction(ops)
            if self.b is None:
                self.b = Stores(other, "c1", blobs=blobs, lease=await win(other), lock_owner="b")
                await fill(self.b, "jb", b"plan-b")
            return result

    hooked = AfterLastCommit(driver)
    late = Stores(hooked, "c1", blobs=blobs, lease=lease_a, lock_owner="a")
    await late.close_and_cleanup_all_data()  # committed under A's fence: no error is due
    assert hooked.b is not None
    await check_b(hooked.b, other, blobs)
    for ref in a_refs:  # A's own payloads went with their pointers
        assert await raw_blob(blobs, ref) is None
    if isinstance(blobs, FileBlobStore):  # only B's three blobs remain
        assert len(files_under(blobs.directory)) == 3
