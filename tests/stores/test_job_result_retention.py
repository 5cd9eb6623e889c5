"""Job results: clean entries are kept by count and by age, then removed (fenced), on every
backend, under asyncio and trio (Flink's JobResultStore deletes an entry once clean, or after
a time to live: FLINK-32806). A dirty entry stays whatever its age: its cleanup is pending.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from ha.drivers.base import Driver
from ha.errors import ConfigurationError, Fenced
from ha.stores import JobOutcome, JobResult, JobResultStore, Stores, codec
from tests.support.stores import LAYOUT, win

pytestmark = pytest.mark.anyio


@pytest.fixture
async def driver(backend: Any) -> AsyncIterator[Driver]:
    async with backend.driver() as d:
        yield d


@pytest.fixture
async def other(backend: Any) -> AsyncIterator[Driver]:
    async with backend.driver() as d:
        yield d


async def finish(store: JobResultStore, job_id: str, *, clean: bool = True) -> None:
    await store.create_dirty(JobResult(job_id, JobOutcome.SUCCEEDED, {"batches": 3}))
    if clean:
        await store.mark_clean(job_id)


async def test_clean_results_past_the_count_expire_oldest_first_and_dirty_ones_stay(
    driver: Driver, other: Driver
) -> None:
    store = JobResultStore(driver, LAYOUT, lease=await win(driver), max_retained=2)
    for n in range(4):
        await finish(store, f"j{n}")
    await finish(store, "j4", clean=False)  # finished last, cleanup pending
    assert await store.expired() == ["j0", "j1"]
    for job_id in await store.expired():
        assert await store.remove(job_id)
    assert [e.result.job_id for e in await store.entries()] == ["j2", "j3", "j4"]
    assert await store.expired() == []
    assert not await store.remove("j0")  # gone already
    with pytest.raises(ConfigurationError, match="dirty"):
        await store.remove("j4")

    # A deposed leader removes nothing.
    newer = JobResultStore(other, LAYOUT, lease=await win(other), max_retained=0)
    assert await newer.expired() == ["j2", "j3"]
    with pytest.raises(Fenced):
        await store.remove("j2")
    assert await newer.has_clean("j2")


async def test_clean_results_past_their_age_expire_and_a_store_without_limits_keeps_all(
    driver: Driver,
) -> None:
    lease = await win(driver)
    store = JobResultStore(driver, LAYOUT, lease=lease, max_retained=None, max_age=60.0)
    before = time.time()
    await finish(store, "a")
    await finish(store, "b")
    await finish(store, "dirty", clean=False)
    entry = await store.get("a")
    assert entry is not None and entry.clean and entry.finished_at >= before
    assert await store.expired(now=entry.finished_at + 30) == []
    assert await store.expired(now=entry.finished_at + 3600) == ["a", "b"]
    keeps_all = JobResultStore(driver, LAYOUT, lease=lease, max_retained=None, max_age=None)
    assert await keeps_all.expired(now=entry.finished_at + 10**9) == []


async def test_an_entry_written_before_finished_at_existed_takes_its_node_time(
    driver: Driver,
) -> None:
    store = JobResultStore(driver, LAYOUT, lease=await win(driver), max_retained=1)
    old = {"job_id": "old", "state": "clean", "outcome": "succeeded", "detail": {}}
    await driver.create(
        f"{LAYOUT.job_results}/old", codec.encode("ha.job-result", old), makepath=True
    )
    entry = await store.get("old")
    assert entry is not None and entry.clean and entry.finished_at > 0
    await finish(store, "new")
    assert await store.expired() == ["old"]


def test_retention_options_are_checked(tmp_path: Any) -> None:
    with pytest.raises(ConfigurationError, match="max_retained"):
        JobResultStore(None, LAYOUT, max_retained=-1)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="max_age"):
        JobResultStore(None, LAYOUT, max_age=-1.0)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="max_age"):
        JobResultStore(None, LAYOUT, max_age=float("nan"))  # type: ignore[arg-type]
    stores = Stores(
        None,  # type: ignore[arg-type]
        "c1",
        blobs=tmp_path,
        max_retained_job_results=5,
        job_result_max_age=3600.0,
    )
    assert (stores.job_results.max_retained, stores.job_results.max_age) == (5, 3600.0)


async def test_an_entry_that_does_not_decode_is_never_expired_nor_in_the_way(
    driver: Driver,
) -> None:
    store = JobResultStore(driver, LAYOUT, lease=await win(driver), max_retained=0)
    await finish(store, "good")
    await driver.create(f"{LAYOUT.job_results}/broken", b"{not json")
    assert await store.expired() == ["good"]
    assert await store.remove("good")
    assert await driver.children(LAYOUT.job_results) == ["broken"]
