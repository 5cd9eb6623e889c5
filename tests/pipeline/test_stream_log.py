"""The stream commit log stays bounded, whatever the stream's age (asyncio and trio).

A micro-batch is committed through the real path (``stream_commit.commit_micro_batch``: a
fenced transaction, then the rename), without Spark: a staged directory of one file stands in
for Spark's output. The verdicts come from outside the writer: the records the backend keeps,
the size of the Kubernetes ConfigMap, a standby joining the election and a new active going
on from where the stream was.

On Kubernetes an ``ha`` root is one ConfigMap of 1 MiB, and a log that never compacted filled
it after about 5,000 micro-batches: the next commit raised ``TooLarge`` and no standby could
join. The default run lowers the driver's limit (``tree.LIMIT``, checked before every write)
so that the same overflow comes after a few hundred batches; ``-m slow`` runs 6,000 against
the real limit.
"""

from __future__ import annotations

import itertools
import secrets
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from ha.drivers.base import Create, Driver
from ha.drivers.kubernetes import tree as kube_tree
from ha.drivers.kubernetes.tree import TooLarge
from ha.election.names import Breadcrumb, ticket_for
from ha.election.nodes import ElectionNodes
from ha.errors import ConfigurationError, Fenced, TransactionFailed
from ha.pipeline.commit import STAGING, batch_dir, committed_batches
from ha.pipeline.commit.stream_commit import (
    COMPACT,
    WINDOW,
    CommitRecord,
    commit_micro_batch,
    count_commits,
    read_commits,
    record_ids,
    remove_commits,
)
from ha.pipeline.layout import JobLayout
from ha.stores import Writer
from tests.support.stores import ELECTION, win

pytestmark = pytest.mark.anyio

LAYOUT = JobLayout("c1")
_tokens = itertools.count()


def stage(output: Path, batch_id: int, rows: str = "r") -> Path:
    staging = output / STAGING / f"batch-{batch_id:05d}.t{next(_tokens)}"
    staging.mkdir(parents=True)
    (staging / "part-00000.parquet").write_text(f"{rows} {batch_id}")
    return staging


async def commit(writer: Writer, out: Path, batch_id: int, **options: Any) -> str:
    return await commit_micro_batch(
        writer, LAYOUT, "j", batch_id, stage(out, batch_id), str(out), **options
    )


async def run_stream(writer: Writer, out: Path, start: int, stop: int, **options: Any) -> None:
    for n in range(start, stop):
        await commit(writer, out, n, **options)
        if n:  # the output is not what is looked at: keep the directory small
            shutil.rmtree(batch_dir(out, n - 1))


async def join_as_standby(driver: Driver) -> None:
    """What a standby's elector writes to join: its queue node and its breadcrumb."""
    ticket = ticket_for(b"standby", secrets.token_hex(4))
    await ElectionNodes(ELECTION).join(driver, ticket, Breadcrumb(b"standby"))


@pytest.fixture(params=["memory", "sqlite"])
def embedded(request: pytest.FixtureRequest) -> Any:
    return request.getfixturevalue(f"{request.param}_backend")


@pytest.fixture
async def two(embedded: Any) -> AsyncIterator[tuple[Driver, Driver]]:
    async with embedded.driver() as first, embedded.driver() as second:
        yield first, second


@pytest.fixture
def small_configmap(monkeypatch: pytest.MonkeyPatch) -> int:
    """The Kubernetes driver refuses a tree over 48 KiB instead of 1 MiB: a log that does
    not compact overflows it after about 220 micro-batches instead of 5,000."""
    monkeypatch.setattr(kube_tree, "LIMIT", 48 * 1024)
    return kube_tree.LIMIT


# --- the log keeps the newest record and a window ------------------------------------------


async def test_the_log_keeps_a_window_and_a_new_active_goes_on_from_the_newest(
    two: tuple[Driver, Driver], tmp_path: Path
) -> None:
    first, second = two
    out, n = tmp_path / "out", 400
    old = Writer(first, await win(first))
    await run_stream(old, out, 0, n)
    assert await record_ids(first, LAYOUT, "j") == list(range(n - WINDOW - 1, n))
    assert await count_commits(second, LAYOUT, "j") == n

    # A takeover: the standby leads, learns the position from the newest record, goes on.
    new = Writer(second, await win(second))
    assert await count_commits(second, LAYOUT, "j") == n
    assert await commit(new, out, n) == "created"
    with pytest.raises(Fenced):  # the deposed active's late batch lands nothing
        await commit(old, out, n + 1)
    records = await read_commits(second, LAYOUT, "j")
    assert [r.batch_id for r in records] == list(range(n - WINDOW, n + 1))
    assert records[-1].epoch == new.lease.epoch > records[-2].epoch
    assert committed_batches(out) == [n - 1, n]


async def test_a_redo_below_the_window_records_nothing_and_shows_the_same_bytes(
    memory_backend: Any, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    async with memory_backend.driver() as driver:
        writer = Writer(driver, await win(driver))
        for n in range(10):
            await commit(writer, out, n, window=3)
        assert await record_ids(driver, LAYOUT, "j") == [6, 7, 8, 9]

        # A Spark checkpoint far behind the log: batch 0 was shown; its redo only passes the
        # fence and finds the same bytes in view.
        assert await commit(writer, out, 0, window=3) == "identical"
        # The oldest record kept is redone without its predecessor's (compacted) record.
        assert await commit(writer, out, 6, window=3) == "identical"
        assert await record_ids(driver, LAYOUT, "j") == [6, 7, 8, 9]
        with pytest.raises(TransactionFailed):  # still no gap
            await commit(writer, out, 11, window=3)
        with pytest.raises(ConfigurationError, match="at least 1"):
            await commit(writer, out, 10, window=0)
        assert await count_commits(driver, LAYOUT, "j") == 10


async def test_a_lowered_window_and_an_old_full_log_shrink_a_few_records_a_commit(
    memory_backend: Any, tmp_path: Path
) -> None:
    out, old = tmp_path / "out", 12 * COMPACT
    async with memory_backend.driver() as driver:
        writer = Writer(driver, await win(driver))
        await run_stream(writer, out, 0, old, window=10**9)  # a log that never compacted
        sizes = []
        n = old
        while not sizes or sizes[-1] > 6:
            await commit(writer, out, n, window=5)
            sizes.append(len(await record_ids(driver, LAYOUT, "j")))
            n += 1
        # each commit adds one record and deletes COMPACT, then what is left over the window
        assert sizes[:10] == [old + 1 - COMPACT - (COMPACT - 1) * k for k in range(10)]
        assert sizes == sorted(sizes, reverse=True) and sizes[-1] == 6
        assert await count_commits(driver, LAYOUT, "j") == n


async def test_batch_ids_past_five_digits_count_and_read_in_order(
    memory_backend: Any, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    async with memory_backend.driver() as driver:
        writer = Writer(driver, await win(driver))
        # the last records of a long stream, as its commits wrote them
        records = [CommitRecord(i, 1, "test", "0" * 64) for i in range(99_995, 100_000)]
        await writer.commit(
            [
                *await writer.parent_ops(LAYOUT.stream_commit("j", 0)),
                *(Create(LAYOUT.stream_commit("j", r.batch_id), r.to_bytes()) for r in records),
            ]
        )
        await commit(writer, out, 100_000, window=3)
        await commit(writer, out, 100_001, window=3)
        assert await count_commits(driver, LAYOUT, "j") == 100_002
        assert await record_ids(driver, LAYOUT, "j") == [99_998, 99_999, 100_000, 100_001]
        assert [r.batch_id for r in (await read_commits(driver, LAYOUT, "j"))[2:]] == [
            100_000,
            100_001,
        ]


async def test_remove_commits_takes_the_whole_log_and_is_idempotent(
    memory_backend: Any, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    async with memory_backend.driver() as driver:
        writer = Writer(driver, await win(driver))
        await run_stream(writer, out, 0, 30)
        await remove_commits(writer, LAYOUT, "j")
        await remove_commits(writer, LAYOUT, "j")
        assert await driver.exists(LAYOUT.stream_commits("j")) is None
        assert await count_commits(driver, LAYOUT, "j") == 0


# --- Kubernetes: one ConfigMap holds the root ----------------------------------------------


async def test_on_kubernetes_the_configmap_stays_small_and_a_standby_joins(
    kubernetes_backend: Any, small_configmap: int, tmp_path: Path
) -> None:
    out, n = tmp_path / "out", 400  # past where a log that never compacts fills 48 KiB
    async with kubernetes_backend.driver() as first, kubernetes_backend.driver() as second:
        old = Writer(first, await win(first))
        await run_stream(old, out, 0, n)
        size = await first.tree_size()
        assert size is not None and size.limit == small_configmap
        assert size.used < small_configmap // 2  # the records kept are a fixed share
        assert len(await record_ids(first, LAYOUT, "j")) == WINDOW + 1

        await join_as_standby(second)
        new = Writer(second, await win(second))  # the standby takes over and goes on
        assert await count_commits(second, LAYOUT, "j") == n
        assert await commit(new, out, n) == "created"


async def test_on_kubernetes_a_configmap_filled_by_a_log_that_never_compacted_heals(
    kubernetes_backend: Any, small_configmap: int, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    async with kubernetes_backend.driver() as first, kubernetes_backend.driver() as second:
        writer = Writer(first, await win(first))
        n = 0
        with pytest.raises(TooLarge):  # what an older version's log came to
            while True:
                await commit(writer, out, n, window=10**9)
                n += 1
        with pytest.raises(TooLarge):
            await join_as_standby(second)

        # Each commit now deletes more than it adds: the stream goes on, a standby can join.
        await commit(writer, out, n)
        await join_as_standby(second)
        while len(await record_ids(first, LAYOUT, "j")) > WINDOW + 1:
            n += 1
            await commit(writer, out, n)
        assert await count_commits(second, LAYOUT, "j") == n + 1


@pytest.mark.slow
@pytest.mark.timeout(900)
async def test_six_thousand_micro_batches_at_the_real_limit(
    kubernetes_backend: Any, tmp_path: Path
) -> None:
    out, n = tmp_path / "out", 6_000  # a log that never compacted was full at about 5,150
    async with kubernetes_backend.driver() as first, kubernetes_backend.driver() as second:
        old = Writer(first, await win(first))
        await run_stream(old, out, 0, n)
        size = await first.tree_size()
        assert size is not None and size.used < size.limit // 20
        await join_as_standby(second)
        new = Writer(second, await win(second))
        assert await count_commits(second, LAYOUT, "j") == n
        assert await commit(new, out, n) == "created"
