"""The driver contract: one suite, run against every backend CI starts, under asyncio and trio.

Every behaviour that ``ha.drivers.base`` promises is tested here, through the ``backend``
fixture of tests/conftest.py (memory, sqlite, ZooKeeper): sessions and their expiry, ephemeral
nodes, versions and compare-and-set, the node operations and their errors, transactions, node
and connection events, path and data validation, closing. A new driver is done when it passes
this suite. To add a backend, write a plugin ``tests/support/backends/<name>.py`` whose fixture
``<name>_backend`` returns a ``tests.support.backends.Backend`` (a URL private to the test and
unstarted drivers on it), list it in tests/conftest.py, and give its driver the faults of
``ha.testing.faults`` (tested on their own in test_faults.py). Behaviour of one backend only
lives in ``test_<backend>.py`` beside this file.

An unsupported operation fails here, it never skips. A backend that breaks the contract today
is marked with ``known_gap`` (a strict xfail naming the finding), so the gap shows in every run
and the mark must go once the driver is fixed.

Time is never asserted as a duration: tests wait on conditions (with a hang guard) and check
orders, outcomes, and the timing assumption against the driver's own ``last_contact``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import anyio
import pytest

import ha.drivers
from ha.drivers.base import (
    Check,
    ConnectionEvent,
    Create,
    Delete,
    Driver,
    NodeEvent,
    NodeEventKind,
    SetData,
    Stat,
)
from ha.errors import (
    BadVersion,
    ConfigurationError,
    ConnectionLost,
    DriverError,
    NodeExists,
    NoNode,
    NotEmpty,
    TransactionFailed,
)
from ha.testing import faults
from tests.support.contact import WAIT, Contact, Events, S, contact

__all__ = ("contact",)  # a fixture

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

CREATED, CHANGED, DELETED = NodeEventKind.CREATED, NodeEventKind.CHANGED, NodeEventKind.DELETED
# session timeouts short enough for expiry tests (ZooKeeper's client needs a little more)
SHORT = {"memory": 0.3, "sqlite": 0.4, "zookeeper": 1.0, "etcd": 1.0, "kubernetes": 1.0}


# --- helpers ------------------------------------------------------------------------------------


async def watch(driver: Driver, path: str) -> Events:
    """Subscribe to ``path``; return once the subscription is in effect.

    A later request of the same driver having been answered is the barrier: ZooKeeper sets its
    watch with a request of its own, and a change another client makes before it arrives would
    be taken for the state at subscription. Events of changes made before may still come (a
    poller's), so tests subscribe before they make the changes they expect to hear of.
    """
    events = Events()
    driver.subscribe(path, events)
    await driver.exists(path)
    return events


async def wait_until(condition: Callable[[], bool], within: float = WAIT) -> None:
    with anyio.fail_after(within):
        while not condition():  # noqa: ASYNC110 - polls state owned by the driver's tasks
            await anyio.sleep(0.005)


def known_gap(request: pytest.FixtureRequest, backend: Any, names: set[str], finding: str) -> float:
    """Mark the test a strict xfail on the backends ``names`` that break it today; return how
    long its waits may take (a gap's event never comes: no need to wait the whole guard)."""
    if backend.name in names:
        request.applymarker(pytest.mark.xfail(strict=True, reason=f"finding: {finding}"))
        return 3.0
    return WAIT


# --- lifecycle ----------------------------------------------------------------------------------


async def test_a_started_driver_has_a_session_and_closing_ends_it(backend: Any) -> None:
    # with test_sqlite.py's test_operations_need_a_started_driver
    await backend.driver().aclose()  # closing a driver never started is harmless
    driver = backend.driver()
    seen = Events()
    driver.subscribe(None, seen)
    with pytest.raises(ConnectionLost):
        await driver.get("/")
    async with backend.driver() as other:
        await driver.start()
        try:
            first = await seen.next()
            assert first == ConnectionEvent(S.CONNECTED, driver.session_id)
            assert driver.session_id is not None and driver.session_id != other.session_id
            assert driver.connected and driver.session_timeout > 0
            assert driver.last_contact <= anyio.current_time()
        finally:
            await driver.aclose()
        assert [event.state for event in seen.events] == [S.CONNECTED, S.CLOSED]
        assert driver.session_id is None and not driver.connected
        with pytest.raises(ConnectionLost):
            await driver.get("/")
        await driver.aclose()  # twice: harmless, and no second CLOSED
        assert len(seen.events) == 2


async def test_drivers_close_in_the_order_they_were_started(backend: Any) -> None:
    # Driver's doc: start and aclose "in any order among several drivers" (a process of many
    # sessions closes them as it likes); the first closed first was a cancel scope exited out
    # of turn on ZooKeeper, whose session's tasks sat in a task group entered in start()
    first, second = backend.driver(), backend.driver()
    await first.start()
    await second.start()
    await first.aclose()
    assert first.session_id is None and second.connected
    await second.get("/")  # the other one still serves
    await second.aclose()
    assert second.session_id is None


async def test_a_close_made_while_another_runs_returns_once_the_session_is_over(
    backend: Any,
) -> None:
    # Driver.aclose: "close the session (its ephemeral nodes go at once)". Two closes at once
    # (a service and its owner closing one driver): the second returned while the first was
    # still closing (ZooKeeper: stopping kazoo; etcd: revoking the lease), the node still there
    driver = backend.driver()
    async with backend.driver() as observer:
        await driver.start()
        await driver.create("/held", b"", ephemeral=True)
        seen: list[tuple[str, bool, int | None]] = []

        async def close(name: str) -> None:
            await driver.aclose()
            seen.append((name, await observer.exists("/held") is None, driver.session_id))

        async with anyio.create_task_group() as tg:
            tg.start_soon(close, "first")
            tg.start_soon(close, "second")
        assert sorted(seen) == [("first", True, None), ("second", True, None)]


async def test_the_url_builds_the_driver_and_its_options(backend: Any) -> None:
    url = backend.url()
    assert ha.drivers.driver_class(url) is type(backend.driver())
    sep = "&" if "?" in url else "?"
    with pytest.raises(ConfigurationError):
        ha.drivers.connect(f"{url}{sep}no_such_option=1")
    for bad in (0, -1.0):
        with pytest.raises(ConfigurationError):
            ha.drivers.connect(url, session_timeout=bad)
    from_url = ha.drivers.connect(f"{url}{sep}session_timeout=3")
    assert from_url.session_timeout == 3.0
    async with from_url, backend.driver() as other:  # the same namespace as the backend's
        await other.create("/shared", b"x")
        assert (await from_url.get("/shared"))[0] == b"x"
        assert from_url.session_timeout == 3.0


def test_capabilities_are_declared(backend: Any) -> None:
    capabilities = type(backend.driver()).capabilities
    assert capabilities.name == backend.name
    assert capabilities.cross_process == backend.cross_process
    assert capabilities.sessions in ("session", "lease")
    assert not capabilities.cross_host or capabilities.cross_process


# --- nodes --------------------------------------------------------------------------------------


async def test_create_get_set_delete_children(backend: Any) -> None:
    # moved from test_zookeeper.py
    async with backend.driver() as zk:
        assert await zk.create("/a", b"one") == "/a"
        data, stat = await zk.get("/a")
        assert (data, stat.version, stat.ephemeral_owner) == (b"one", 0, None)
        assert type(data) is bytes and abs(stat.mtime - time.time()) < 60
        stat = await zk.set("/a", b"two", version=0)
        assert stat.version == 1
        assert (await zk.get("/a"))[0] == b"two"
        assert (await zk.set("/a", b"three")).version == 2  # -1: any version
        assert await zk.create("/a/b/c", b"deep", makepath=True) == "/a/b/c"
        parent_data, parent = await zk.get("/a/b")  # made by makepath: empty, persistent
        assert parent_data == b"" and parent == await zk.exists("/a/b")
        assert parent.ephemeral_owner is None
        await zk.create("/a/z")
        assert await zk.children("/a") == ["b", "z"]
        now = await zk.exists("/a")
        assert now == Stat(
            2,
            None,
            now.mtime,  # type: ignore[union-attr]
            num_children=2,
            created=stat.created,  # the create's, through every set
        )
        await zk.delete("/a/z", version=0)
        assert await zk.exists("/a/z") is None
        await zk.delete("/a", recursive=True)
        assert await zk.exists("/a") is None
        assert await zk.children("/") == []
        await zk.create("/a", b"again")  # a node made again starts over at version 0
        assert (await zk.get("/a"))[1].version == 0


async def test_node_errors(backend: Any) -> None:
    # moved from test_zookeeper.py
    async with backend.driver() as zk:
        await zk.create("/n", b"x")
        with pytest.raises(NodeExists) as exists:
            await zk.create("/n")
        assert exists.value.path == "/n"
        with pytest.raises(NoNode):
            await zk.create("/missing/child")
        for call in (zk.get, zk.children, zk.delete, lambda p: zk.set(p, b"")):
            with pytest.raises(NoNode) as missing:
                await call("/missing")
            assert missing.value.path == "/missing"
        with pytest.raises(BadVersion) as bad:
            await zk.set("/n", b"y", version=7)
        assert (bad.value.path, bad.value.expected) == ("/n", 7)
        with pytest.raises(BadVersion):
            await zk.delete("/n", version=3)
        await zk.create("/n/child")
        with pytest.raises(NotEmpty) as full:
            await zk.delete("/n")
        assert full.value.path == "/n"
        with pytest.raises(BadVersion):
            await zk.delete("/n", version=5, recursive=True)
        assert await zk.exists("/n/child") is not None  # nothing of the subtree went
        with pytest.raises(NoNode):
            await zk.delete("/missing", recursive=True)
        await zk.create("/eph", ephemeral=True)
        with pytest.raises(NoNode):
            await zk.create("/eph/child")
        with pytest.raises(ConfigurationError):
            await zk.get("relative")
        assert await zk.exists("/missing") is None
        with pytest.raises(NodeExists):
            await zk.create("/")
        assert isinstance(exists.value, DriverError) and not exists.value.transient


async def test_children_are_sorted_names_of_direct_children(backend: Any) -> None:
    async with backend.driver() as driver:
        assert await driver.children("/") == []
        assert (await driver.exists("/")) is not None  # the root always exists
        await driver.create("/p/q/r", makepath=True)
        await driver.create("/p/b")
        await driver.create("/p-sibling")  # shares a prefix: not a child of /p
        assert await driver.children("/p") == ["b", "q"]
        assert await driver.children("/") == ["p", "p-sibling"]
        assert (await driver.get("/p"))[1].num_children == 2
        await driver.delete("/p", recursive=True)
        assert await driver.children("/") == ["p-sibling"]


async def test_tree_parents_children_and_recursive_delete(backend: Any) -> None:
    # moved from test_sqlite.py
    async with backend.driver() as driver:
        with pytest.raises(NoNode):
            await driver.create("/p/q")
        await driver.create("/p/q/r", makepath=True)
        await driver.create("/p/b")
        await driver.create("/p-sibling")  # sorts between '/p' and '/p/...': not a child
        assert await driver.children("/p") == ["b", "q"]
        assert await driver.children("/") == ["p", "p-sibling"]
        assert (await driver.get("/p"))[1].num_children == 2
        with pytest.raises(NotEmpty):
            await driver.delete("/p")
        await driver.delete("/p", recursive=True)
        assert await driver.children("/") == ["p-sibling"]
        with pytest.raises(NoNode):
            await driver.children("/p")
        with pytest.raises(NodeExists):
            await driver.create("/")
        with pytest.raises(ConfigurationError):
            await driver.delete("/", recursive=True)
        with pytest.raises(ConfigurationError):
            await driver.get("no-slash")


async def test_the_root_cannot_be_deleted(backend: Any) -> None:
    async with backend.driver() as driver:
        await driver.create("/kept")
        for recursive in (False, True):
            with pytest.raises(ConfigurationError):
                await driver.delete("/", recursive=recursive)
        with pytest.raises(ConfigurationError):
            await driver.transaction([Delete("/")])
        assert await driver.children("/") == ["kept"]


async def test_bytes_round_trip_unchanged(backend: Any) -> None:
    # moved from test_zookeeper.py
    blobs = [b"", b"\x00", bytes(range(256)), b"\xff\xfe not utf-8 \xc3\x28", b"\x00" * 100_000]
    async with backend.driver() as zk:
        for index, blob in enumerate(blobs):
            await zk.create(f"/b{index}", blob)
            assert (await zk.get(f"/b{index}"))[0] == blob
            await zk.set(f"/b{index}", bytearray(blob[::-1]))
            assert (await zk.get(f"/b{index}"))[0] == blob[::-1]
        data = bytearray(b"before")
        await zk.create("/copied", data)
        await zk.transaction([SetData("/copied", memoryview(data))])  # type: ignore[arg-type]
        data[:] = b"after!"  # the caller's buffer changes later: the node does not
        assert (await zk.get("/copied"))[0] == b"before"


async def test_node_data_must_be_bytes(backend: Any) -> None:
    async with backend.driver() as driver:
        await driver.create("/a")
        with pytest.raises(ConfigurationError):
            await driver.set("/a", "text")  # type: ignore[arg-type]
        with pytest.raises(ConfigurationError):
            await driver.create("/b", "text")  # type: ignore[arg-type]
        with pytest.raises(ConfigurationError):  # bytes(5) would be five zero bytes
            await driver.set("/a", 5)  # type: ignore[arg-type]
        with pytest.raises(ConfigurationError):  # refused before any parent is made
            await driver.create("/p/q", "text", makepath=True)  # type: ignore[arg-type]
        for op in (Create("/c", "text"), SetData("/a", 5)):  # type: ignore[arg-type]
            with pytest.raises(ConfigurationError):
                await driver.transaction([op])
        assert await driver.children("/") == ["a"]
        assert (await driver.get("/a"))[1].version == 0


@pytest.mark.parametrize("path", ["relative", "", "/trailing/", "/a//b", "/nul\x00"])
async def test_malformed_paths_are_configuration_errors(backend: Any, path: str) -> None:
    async with backend.driver() as driver:
        calls = [
            lambda: driver.create(path),
            lambda: driver.get(path),
            lambda: driver.exists(path),
            lambda: driver.set(path, b""),
            lambda: driver.delete(path),
            lambda: driver.children(path),
            lambda: driver.ensure_path(path),
            lambda: driver.transaction([Check("/"), Create(path)]),
        ]
        for call in calls:
            with pytest.raises(ConfigurationError):
                await call()
        with pytest.raises(ConfigurationError):
            driver.subscribe(path, Events())
        assert await driver.children("/") == []  # nothing was created


async def test_ensure_path_makes_missing_persistent_parents(backend: Any) -> None:
    async with backend.driver() as driver:
        await driver.ensure_path("/")
        await driver.create("/x", b"kept")
        await driver.ensure_path("/x/y/z")
        await driver.ensure_path("/x/y/z")  # again: nothing to do
        assert (await driver.get("/x"))[0] == b"kept"
        stat = await driver.exists("/x/y/z")
        assert stat is not None and stat.ephemeral_owner is None


async def test_ensure_paths_makes_each_path_in_order(backend: Any) -> None:
    async with backend.driver() as driver:
        await driver.create("/x", b"kept")
        await driver.ensure_paths(["/x/y/a", "/x/y/b", "/z"])
        await driver.ensure_paths(["/x/y/a", "/z"])  # again: nothing to do
        assert (await driver.get("/x"))[0] == b"kept"
        assert await driver.children("/x/y") == ["a", "b"]
        for path in ("/x/y", "/x/y/a", "/x/y/b", "/z"):
            stat = await driver.exists(path)
            assert stat is not None and stat.ephemeral_owner is None, path
        await driver.create("/e", ephemeral=True)
        with pytest.raises(NoNode):
            await driver.ensure_paths(["/w", "/e/f"])
        assert await driver.exists("/w") is not None  # the paths before the failing one
        assert await driver.children("/e") == []


async def test_one_driver_serves_many_tasks_at_once(backend: Any) -> None:
    async with backend.driver() as driver:
        await driver.create("/c")

        async def work(index: int) -> None:
            await driver.create(f"/c/{index:02}", b"0")
            await driver.set(f"/c/{index:02}", b"1", 0)

        async with anyio.create_task_group() as tg:
            for index in range(20):
                tg.start_soon(work, index)
        assert await driver.children("/c") == [f"{i:02}" for i in range(20)]


async def test_a_cancelled_operation_leaves_the_driver_usable(backend: Any) -> None:
    async with backend.driver() as driver:
        with anyio.move_on_after(0):
            await driver.create("/maybe")  # its outcome is unknown, like a lost reply's
        await driver.create("/after")
        assert await driver.exists("/after") is not None


async def test_sessions_race_for_one_node_and_one_version(backend: Any) -> None:
    async with backend.driver() as a, backend.driver() as b:
        outcomes: dict[int, str] = {}

        async def take(driver: Driver) -> None:
            try:
                await driver.create("/lock", ephemeral=True)
                outcomes[driver.session_id or 0] = "won"
            except NodeExists:
                outcomes[driver.session_id or 0] = "lost"

        async with anyio.create_task_group() as tg:
            tg.start_soon(take, a)
            tg.start_soon(take, b)
        assert sorted(outcomes.values()) == ["lost", "won"]
        winner = next(sid for sid, outcome in outcomes.items() if outcome == "won")
        assert (await a.exists("/lock")).ephemeral_owner == winner  # type: ignore[union-attr]

        await a.create("/counter", b"0")
        stored: list[bytes] = []

        async def bump(driver: Driver, value: bytes) -> None:
            try:
                await driver.set("/counter", value, 0)
                stored.append(value)
            except BadVersion:
                pass

        async with anyio.create_task_group() as tg:
            tg.start_soon(bump, a, b"a")
            tg.start_soon(bump, b, b"b")
        assert len(stored) == 1  # compare-and-set: exactly one writer of version 0 wins
        data, stat = await b.get("/counter")
        assert (data, stat.version) == (stored[0], 1)


# --- transactions -------------------------------------------------------------------------------


async def test_transaction_applies_every_op(backend: Any) -> None:
    # moved from test_zookeeper.py
    async with backend.driver() as zk:
        await zk.create("/epoch", b"1")
        await zk.create("/old")
        results = await zk.transaction(
            [
                Check("/epoch", 0),
                SetData("/epoch", b"2", 0),
                Create("/new", b"n", ephemeral=True),
                Delete("/old", 0),
            ]
        )
        assert results[0] is None and results[3] is None
        assert isinstance(results[1], Stat) and results[1].version == 1
        assert results[2] == "/new"
        assert (await zk.get("/epoch"))[0] == b"2"
        assert (await zk.exists("/new")).ephemeral_owner == zk.session_id  # type: ignore[union-attr]
        assert await zk.exists("/old") is None
        assert await zk.transaction([]) == []


@pytest.mark.parametrize(
    ("failing", "cause"),
    [
        (Check("/epoch", 5), BadVersion),
        (SetData("/epoch", b"x", 9), BadVersion),
        (Check("/absent"), NoNode),
        (Create("/taken"), NodeExists),
        (Delete("/taken"), NotEmpty),
        (Delete("/absent"), NoNode),
    ],
    ids=["check", "set", "check-missing", "create", "delete-not-empty", "delete-missing"],
)
async def test_transaction_is_all_or_nothing(
    backend: Any, failing: Any, cause: type[Exception]
) -> None:
    # moved from test_zookeeper.py
    async with backend.driver() as zk:
        await zk.create("/epoch", b"1")
        await zk.create("/taken/child", makepath=True)
        ops = [SetData("/epoch", b"2"), Create("/fresh", b"f"), failing, Create("/after")]
        with pytest.raises(TransactionFailed) as failed:
            await zk.transaction(ops)
        assert failed.value.index == 2
        assert isinstance(failed.value.cause, cause)
        assert failed.value.cause.path == failing.path  # type: ignore[attr-defined]
        data, stat = await zk.get("/epoch")
        assert (data, stat.version) == (b"1", 0)
        assert await zk.exists("/fresh") is None and await zk.exists("/after") is None


async def test_transactions_are_all_or_nothing(backend: Any) -> None:
    # moved from test_sqlite.py
    async with backend.driver() as driver:
        await driver.create("/x", b"0")
        await driver.create("/full")
        await driver.create("/full/child")
        failing = [
            ([Create("/t"), SetData("/x", b"1", 7)], 1, BadVersion),
            ([Create("/t"), Check("/missing")], 1, NoNode),
            ([Create("/t"), Create("/x")], 1, NodeExists),
            ([SetData("/x", b"1"), Create("/t"), Delete("/full")], 2, NotEmpty),
            ([Create("/t"), Create("/t")], 1, NodeExists),
        ]
        for ops, index, cause in failing:
            with pytest.raises(TransactionFailed) as failed:
                await driver.transaction(ops)
            assert failed.value.index == index
            assert isinstance(failed.value.cause, cause)
            assert await driver.exists("/t") is None
            data, stat = await driver.get("/x")
            assert (data, stat.version) == (b"0", 0)
        results = await driver.transaction(
            [
                Check("/x", 0),
                SetData("/x", b"1", 0),
                Create("/t", b"t", ephemeral=True),
                Delete("/full/child"),
                Delete("/full"),
            ]
        )
        assert results[0] is None and results[2] == "/t" and results[3:] == [None, None]
        assert isinstance(results[1], Stat) and results[1].version == 1
        assert (await driver.get("/t"))[1].ephemeral_owner == driver.session_id
        assert await driver.exists("/full") is None


async def test_later_ops_of_a_transaction_see_the_earlier_ones(backend: Any) -> None:
    async with backend.driver() as driver:
        results = await driver.transaction(
            [
                Create("/p", b"0"),
                Create("/p/c"),
                SetData("/p", b"1", 0),
                SetData("/p", b"2", 1),
                Check("/p", 2),
                Delete("/p/c"),
                Create("/p/c", b"again"),
            ]
        )
        assert results[:2] == ["/p", "/p/c"] and results[4:] == [None, None, "/p/c"]
        assert [r.version for r in results[2:4]] == [1, 2]  # type: ignore[union-attr]
        assert (await driver.get("/p/c"))[0] == b"again"
        assert (await driver.get("/p"))[1].version == 2


async def test_a_transaction_of_non_ops_is_a_configuration_error(backend: Any) -> None:
    async with backend.driver() as driver:
        with pytest.raises(ConfigurationError):
            await driver.transaction([Create("/a"), "not an op"])  # type: ignore[list-item]
        assert await driver.exists("/a") is None


# --- sequential creates and creation order -------------------------------------------------------


def suffix(path: str, prefix: str) -> int:
    """The counter a sequential create appended to ``prefix``: ten digits or more."""
    assert path.startswith(prefix), (path, prefix)
    digits = path[len(prefix) :]
    assert len(digits) >= 10 and digits.isdigit() and digits.isascii(), path
    return int(digits)


async def test_sequential_creates_append_a_growing_suffix(backend: Any) -> None:
    async with backend.driver() as driver:
        await driver.create("/q")
        made = [await driver.create("/q/n_", b"%d" % i, sequential=True) for i in range(3)]
        numbers = [suffix(path, "/q/n_") for path in made]
        assert numbers == sorted(set(numbers))  # strictly increasing
        for i, path in enumerate(made):
            assert (await driver.get(path))[0] == b"%d" % i
        assert await driver.children("/q") == sorted(p.rsplit("/", 1)[1] for p in made)
        # with makepath, as a plain create: the missing parents first
        deep = await driver.create("/r/s/n_", sequential=True, makepath=True)
        suffix(deep, "/r/s/n_")
        assert await driver.exists(deep) is not None


async def test_a_sequential_create_in_a_transaction(backend: Any) -> None:
    async with backend.driver() as driver:
        results = await driver.transaction(
            [
                Create("/q", b"parent"),
                Create("/q/n_", b"mine", ephemeral=True, sequential=True),
                Create("/q/n_", b"next", sequential=True),
            ]
        )
        assert results[0] == "/q"
        mine, later = results[1], results[2]
        assert isinstance(mine, str) and isinstance(later, str)
        assert suffix(mine, "/q/n_") < suffix(later, "/q/n_")
        data, stat = await driver.get(mine)
        assert data == b"mine" and stat.ephemeral_owner == driver.session_id
        assert (await driver.get(later))[1].ephemeral_owner is None
        assert (await driver.get("/q"))[0] == b"parent"
        # a failed transaction creates nothing, and its suffix may be skipped, never reused
        with pytest.raises(TransactionFailed) as failed:
            await driver.transaction([Create("/q/n_", sequential=True), Check("/absent")])
        assert failed.value.index == 1
        assert len(await driver.children("/q")) == 2
        again = await driver.create("/q/n_", sequential=True)
        assert suffix(again, "/q/n_") > suffix(later, "/q/n_")


async def test_an_ephemeral_sequential_node_goes_with_its_session(backend: Any) -> None:
    async with backend.driver() as observer:
        await observer.create("/q")
        owner = backend.driver()
        seen = Events()
        owner.subscribe(None, seen)
        async with owner:
            await seen.next()
            first = await owner.create("/q/n_", ephemeral=True, sequential=True)
            assert (await observer.exists(first)).ephemeral_owner == owner.session_id  # type: ignore[union-attr]
            await faults(owner).expire()
            assert (await seen.state()).state is S.EXPIRED
            assert (await seen.next()).state is S.CONNECTED
            await wait_until(lambda: owner.connected)
            assert await observer.exists(first) is None
            second = await owner.create("/q/n_", ephemeral=True, sequential=True)
            assert suffix(second, "/q/n_") > suffix(first, "/q/n_")
            assert await observer.children("/q") == [second.rsplit("/", 1)[1]]
        # closing the session takes its node at once
        assert await observer.exists(second) is None
        assert await observer.children("/q") == []


async def test_sequential_suffixes_are_never_reused(backend: Any) -> None:
    async with backend.driver() as driver:
        await driver.create("/q")
        made = [await driver.create("/q/n_", sequential=True) for _ in range(3)]
        for path in made:
            await driver.delete(path)
        assert await driver.children("/q") == []
        after = await driver.create("/q/n_", sequential=True)
        assert suffix(after, "/q/n_") > max(suffix(p, "/q/n_") for p in made)


async def test_created_numbers_the_creating_transaction(backend: Any) -> None:
    async with backend.driver() as driver:
        await driver.transaction([Create("/a"), Create("/b", ephemeral=True), Create("/a/c")])
        a, b, c = [(await driver.get(p))[1] for p in ("/a", "/b", "/a/c")]
        assert a.created == b.created == c.created > 0  # one transaction, one number
        await driver.transaction([Create("/d"), SetData("/a", b"x")])
        d = await driver.exists("/d")
        assert d is not None and d.created > a.created
        # writes leave it alone: set()'s Stat, then a read
        assert (await driver.set("/a", b"y")).created == a.created
        assert (await driver.get("/a"))[1].created == a.created
        assert (await driver.exists("/a/c")).created == a.created  # type: ignore[union-attr]
        # a single create is a transaction of its own
        e = await driver.create("/e")
        assert (await driver.get(e))[1].created > d.created
        # deleted and created again: a new, greater number
        await driver.delete("/b")
        await driver.create("/b")
        again = (await driver.get("/b"))[1]
        assert again.created > (await driver.get("/e"))[1].created
        # deleted and created again in one transaction: the same rule
        await driver.transaction([Delete("/d"), Create("/d")])
        assert (await driver.get("/d"))[1].created > again.created
        # a sequential node too, and another driver reads the same number
        async with backend.driver() as other:
            seq = await driver.create("/a/n_", ephemeral=True, sequential=True)
            stat = await other.exists(seq)
            assert stat is not None and stat.created > (await other.get("/d"))[1].created
            assert stat == await driver.exists(seq)


async def test_sequential_creates_of_two_sessions_race_to_distinct_paths(backend: Any) -> None:
    async with backend.driver() as a, backend.driver() as b:
        await a.create("/q")
        made: list[str] = []

        async def join(driver: Driver) -> None:
            made.append(await driver.create("/q/n_", ephemeral=True, sequential=True))

        for _ in range(5):
            async with anyio.create_task_group() as tg:
                tg.start_soon(join, a)
                tg.start_soon(join, b)
        assert len(set(made)) == len(made) == 10
        assert await a.children("/q") == sorted(p.rsplit("/", 1)[1] for p in made)
        stats = [await b.exists(p) for p in made]
        assert all(stat is not None for stat in stats)
        owners = {stat.ephemeral_owner for stat in stats}  # type: ignore[union-attr]
        assert owners == {a.session_id, b.session_id}
        # creation order and suffix order agree: both are the order the backend applied them
        by_suffix = sorted(made, key=lambda p: suffix(p, "/q/n_"))
        created = [(await a.exists(p)).created for p in by_suffix]  # type: ignore[union-attr]
        assert created == sorted(set(created))


# --- sessions and ephemeral nodes ---------------------------------------------------------------


async def test_ephemeral_nodes_belong_to_the_session_and_go_with_it(backend: Any) -> None:
    # moved from test_zookeeper.py and test_sqlite.py (three tests)
    async with backend.driver() as watcher:
        events = await watch(watcher, "/lock")
        owner = backend.driver()
        seen = Events()
        owner.subscribe(None, seen)
        await owner.start()
        try:
            await owner.create("/lock", b"me", ephemeral=True)
            await owner.create("/kept")
            assert (await owner.get("/lock"))[1].ephemeral_owner == owner.session_id
            stat = await watcher.exists("/lock")
            assert stat is not None and stat.ephemeral_owner == owner.session_id
            assert watcher.session_id != owner.session_id
            assert (await events.next()) == NodeEvent("/lock", CREATED)
            with pytest.raises(NoNode, match="ephemeral"):
                await owner.create("/lock/child")
        finally:
            await owner.aclose()
        # gone as soon as aclose returns, not after the timeout or a poll later
        assert await watcher.exists("/lock") is None
        assert await watcher.exists("/kept") is not None
        assert (await events.next()) == NodeEvent("/lock", DELETED)
        assert [e.state for e in seen.events] == [S.CONNECTED, S.CLOSED]
        assert owner.session_id is None and not owner.connected


async def test_a_close_under_cancellation_still_ends_the_session(backend: Any) -> None:
    # found on Kubernetes by the chaos rounds: a driver closed while its caller is being
    # cancelled (``async with`` in a cancelled scope) skipped its clean-up, so its session
    # and ephemeral nodes stayed for the session timeout and its connections leaked
    async with backend.driver() as watcher:
        owner = backend.driver()
        with anyio.CancelScope() as scope:
            async with owner:
                await owner.create("/lock", b"me", ephemeral=True)
                await owner.exists("/lock")  # a watch of its own, if the driver keeps one
                scope.cancel()
                await anyio.sleep_forever()
        assert owner.session_id is None and not owner.connected
        assert await watcher.exists("/lock") is None  # gone at once, as after any close


async def test_forced_expiry(backend: Any) -> None:
    # moved from test_zookeeper.py (with an observer in another session)
    zk = backend.driver()
    seen, node = Events(), Events()
    zk.subscribe(None, seen)
    zk.subscribe("/lock", node)
    async with zk, backend.driver() as observer:
        await seen.next()
        old = zk.session_id
        gone = await watch(observer, "/lock")
        await zk.create("/lock", ephemeral=True)
        assert (await node.next()).kind == CREATED
        assert await gone.next() == NodeEvent("/lock", CREATED)
        await faults(zk).expire()
        assert await seen.state() == ConnectionEvent(S.EXPIRED, old)
        new = await seen.next()
        assert new.state == S.CONNECTED and new.session_id not in (None, old)
        assert zk.session_id == new.session_id and zk.connected
        # the watch came back with the new session and reports what changed meanwhile
        assert await node.next() == NodeEvent("/lock", DELETED)
        assert await gone.next() == NodeEvent("/lock", DELETED)
        await zk.create("/lock", ephemeral=True)
        assert (await zk.exists("/lock")).ephemeral_owner == new.session_id  # type: ignore[union-attr]
        assert all(isinstance(event, NodeEvent) for event in node.events)


async def test_a_silent_session_expires_no_earlier_than_last_contact_plus_timeout(
    backend: Any, contact: Contact
) -> None:
    # the timing assumption of ha.drivers.base, checked from another session's reads
    timeout = SHORT[backend.name]
    async with backend.driver(session_timeout=timeout) as driver, backend.driver() as observer:
        seen = Events()
        driver.subscribe(None, seen)
        old = driver.session_id
        await driver.create("/e", ephemeral=True)
        contact.cut(driver)
        try:
            while True:  # each read: was the node there when the reply came back?
                present = await observer.exists("/e") is not None
                replied = anyio.current_time()
                if not present:
                    break
                await anyio.sleep(0.01)
            # the backend ended the session; the cut-off client still holds its old contact
            assert driver.session_id == old
            assert replied >= driver.last_contact + driver.session_timeout
        finally:
            contact.restore(driver)
        assert await seen.state() == ConnectionEvent(S.EXPIRED, old)
        new = await seen.next()
        assert new.state is S.CONNECTED and new.session_id not in (None, old)
        assert await driver.exists("/e") is None
        await driver.create("/e", ephemeral=True)
        assert (await observer.exists("/e")).ephemeral_owner == new.session_id  # type: ignore[union-attr]


async def test_a_short_disconnection_keeps_the_session(backend: Any, contact: Contact) -> None:
    async with backend.driver() as driver, backend.driver() as observer:
        seen = Events()
        driver.subscribe(None, seen)
        session = driver.session_id
        node = await watch(driver, "/mine")
        await driver.create("/mine", ephemeral=True)
        assert await node.next() == NodeEvent("/mine", CREATED)
        await contact.drop(driver)
        assert await seen.next() == ConnectionEvent(S.DISCONNECTED, session)
        assert not driver.connected
        await contact.back(driver)
        assert await seen.next() == ConnectionEvent(S.RECONNECTED, session)
        assert driver.connected and driver.session_id == session
        assert await observer.exists("/mine") is not None  # the session kept its node
        await observer.set("/mine", b"changed")  # the watch still works
        assert await node.next() == NodeEvent("/mine", CHANGED)


async def test_last_contact_stays_fresh_and_never_ahead(backend: Any) -> None:
    async with backend.driver() as driver:
        start = anyio.current_time()
        await driver.create("/x")
        await wait_until(lambda: driver.last_contact >= start)  # renewed without being asked
        assert driver.last_contact <= anyio.current_time()
        assert anyio.current_time() - driver.last_contact < driver.session_timeout


# --- events -------------------------------------------------------------------------------------


async def test_node_events_for_subscribed_paths(backend: Any) -> None:
    # moved from test_zookeeper.py
    async with backend.driver() as zk, backend.driver() as other:
        x, y = Events(), Events()
        sub_x = zk.subscribe("/x", x)
        zk.subscribe("/y", y)
        await zk.exists("/x")  # the watch is armed by a request sent before this one
        await other.create("/x", b"1")
        assert await x.next() == NodeEvent("/x", CREATED)
        await other.set("/x", b"2")
        assert await x.next() == NodeEvent("/x", CHANGED)
        await other.delete("/x")
        assert await x.next() == NodeEvent("/x", DELETED)
        sub_x.close()
        sub_x.close()  # idempotent
        await other.create("/x")
        await other.create("/y")
        assert await y.next() == NodeEvent("/y", CREATED)
        assert x.pending() == []  # nothing after unsubscribing
        assert zk.watched_paths() == ["/y"]


async def test_a_change_right_after_subscribe_is_delivered(
    request: pytest.FixtureRequest, backend: Any, contact: Contact
) -> None:
    # base.py: a subscriber "never misses a change after" subscribe(), even one that another
    # session makes before the driver's watch has reached the backend (ZooKeeper sets it with
    # a request of its own). Cut off, the driver can send nothing: a backend that took the
    # state it finds on its return for the state at subscribe() would miss these changes.
    within = known_gap(
        request,
        backend,
        {"zookeeper"},
        "the first arming of a watch takes the node as it finds it for the state at"
        " subscribe(): a change another client makes before the watch reaches the server is"
        " missed (about a third of the time when made straight after subscribe)",
    )
    async with backend.driver() as driver, backend.driver() as other:
        await other.create("/changed", b"0")
        await driver.exists("/changed")  # the driver has seen it: its creation is history
        new, changed = Events(), Events()
        contact.cut(driver)
        try:
            driver.subscribe("/new", new)
            driver.subscribe("/changed", changed)
            await other.create("/new")
            await other.set("/changed", b"1")
        finally:
            contact.restore(driver)
        # events of changes from before subscribe() may come first (a poller's): not asserted
        await wait_until(lambda: NodeEvent("/new", CREATED) in new.events, within)
        await wait_until(lambda: NodeEvent("/changed", CHANGED) in changed.events, within)
        # connected, the change races the request that sets the watch
        for index in range(20):
            raced, path = Events(), f"/raced{index}"
            driver.subscribe(path, raced)
            await other.create(path)
            await wait_until(lambda e=raced, p=path: NodeEvent(p, CREATED) in e.events, within)  # type: ignore[misc]


async def test_a_deletion_right_after_subscribe_is_delivered(
    request: pytest.FixtureRequest, backend: Any, contact: Contact
) -> None:
    within = known_gap(
        request,
        backend,
        {"zookeeper"},
        "a node another client deletes before the watch reaches the server is missed (an"
        " absent node leaves no stat whose zxids would tell when it went)",
    )
    async with backend.driver() as driver, backend.driver() as other:
        await other.create("/doomed")
        await driver.exists("/doomed")
        gone = Events()
        contact.cut(driver)
        try:
            driver.subscribe("/doomed", gone)
            await other.delete("/doomed")
        finally:
            contact.restore(driver)
        await wait_until(lambda: NodeEvent("/doomed", DELETED) in gone.events, within)


async def test_no_event_lost_when_a_subscriber_reacts_at_once(backend: Any) -> None:
    # moved from test_zookeeper.py: a standby re-creates the lock as soon as it hears of its
    # deletion, and so on: each reaction lands right after an event
    async with backend.driver() as zk, backend.driver() as other:
        seen = await watch(zk, "/lock")
        for _ in range(5):
            await other.create("/lock")
            assert await seen.next() == NodeEvent("/lock", CREATED)
            await zk.set("/lock", b"mine")
            assert await seen.next() == NodeEvent("/lock", CHANGED)
            await other.delete("/lock")
            assert await seen.next() == NodeEvent("/lock", DELETED)
            await zk.create("/lock")
            assert await seen.next() == NodeEvent("/lock", CREATED)
            await zk.delete("/lock")
            assert await seen.next() == NodeEvent("/lock", DELETED)


async def test_events_of_different_paths_come_in_the_order_of_the_writes(backend: Any) -> None:
    # A standby that hears of a pause before its leader's exit must not take the lead: it acts
    # on the order. ZooKeeper's driver reported a creation once its watch was re-armed, and a
    # deletion fired meanwhile overtook it (tests/election/test_pause.py failed 1 run in 3).
    async with backend.driver() as driver, backend.driver() as other:
        seen = Events()
        driver.subscribe("/pause", seen)
        driver.subscribe("/leader", seen)
        await driver.exists("/leader")  # both subscriptions in effect (see ``watch``)
        await other.create("/leader")
        assert await seen.next() == NodeEvent("/leader", CREATED)
        for _ in range(3):
            await other.transaction([Create("/pause"), Delete("/leader")])
            assert [await seen.next(), await seen.next()] == [
                NodeEvent("/pause", CREATED),
                NodeEvent("/leader", DELETED),
            ]
            await other.transaction([SetData("/pause", b"x"), Create("/leader")])
            assert [await seen.next(), await seen.next()] == [
                NodeEvent("/pause", CHANGED),
                NodeEvent("/leader", CREATED),
            ]
            await other.transaction([Delete("/pause"), Delete("/leader"), Create("/leader")])
            assert [await seen.next(), await seen.next(), await seen.next()] == [
                NodeEvent("/pause", DELETED),
                NodeEvent("/leader", DELETED),
                NodeEvent("/leader", CREATED),
            ]


async def test_transaction_events_and_replaced_node(backend: Any) -> None:
    # moved from test_zookeeper.py
    async with backend.driver() as zk, backend.driver() as other:
        seen = await watch(zk, "/lock")
        await zk.create("/lock", b"a")
        assert await seen.next() == NodeEvent("/lock", CREATED)
        # deleted and created again in one transaction: seen as both, in that order
        await other.transaction([Delete("/lock"), Create("/lock", b"b")])
        assert [await seen.next(), await seen.next()] == [
            NodeEvent("/lock", DELETED),
            NodeEvent("/lock", CREATED),
        ]


async def test_own_writes_and_recursive_deletes_give_events(backend: Any) -> None:
    # moved from test_sqlite.py
    async with backend.driver() as driver:
        child_events, parent_events = Events(), Events()
        with driver.subscribe("/r/a", child_events), driver.subscribe("/r", parent_events):
            await driver.create("/r/a", makepath=True)
            assert await parent_events.next() == NodeEvent("/r", CREATED)
            assert await child_events.next() == NodeEvent("/r/a", CREATED)
            await driver.delete("/r", recursive=True)
            assert await child_events.next() == NodeEvent("/r/a", DELETED)
            assert await parent_events.next() == NodeEvent("/r", DELETED)


async def test_closed_subscription_gets_no_more_events(backend: Any) -> None:
    # moved from test_sqlite.py
    async with backend.driver() as driver:
        sentinel, quiet = Events(), Events()
        with driver.subscribe("/sentinel", sentinel):
            with driver.subscribe("/quiet", quiet):
                pass  # subscribed, then closed
            await driver.create("/quiet")
            await driver.create("/sentinel")
            # events of one driver's own writes come in order: /quiet's would have come first
            assert await sentinel.next() == NodeEvent("/sentinel", CREATED)
            assert quiet.events == []
        assert driver.watched_paths() == []


async def test_every_subscriber_of_a_path_is_called_on_the_loop_thread(backend: Any) -> None:
    loop_thread = threading.get_ident()
    async with backend.driver() as driver, backend.driver() as other:
        states = Events()
        driver.subscribe(None, states)

        def broken(event: Any) -> None:
            raise RuntimeError("a subscriber's bug")

        driver.subscribe("/n", broken)  # logged and dropped: the others still hear
        first = await watch(driver, "/n")
        second = Events()
        with driver.subscribe("/n", second):
            await other.create("/n")
            assert await first.next() == await second.next() == NodeEvent("/n", CREATED)
        await other.delete("/n")
        assert await first.next() == NodeEvent("/n", DELETED)
        assert second.pending() == []
    assert [event.state for event in states.events] == [S.CLOSED]  # subscribed after CONNECTED
    assert first.threads == second.threads == states.threads == {loop_thread}
