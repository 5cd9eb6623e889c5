"""The sqlite driver: operations, transactions, sessions, events, and real processes.

Child processes run the small script ``CHILD`` below: a member holding an ephemeral node, a
writer killed in the middle of its transactions, or a compare-and-set incrementer. Time is
never asserted as a duration: tests check the order of events, outcomes, and, for expiry, the
shared CLOCK_MONOTONIC against the lease the database holds.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import random
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import anyio.abc
import anyio.to_thread
import pytest
from anyio.streams.memory import MemoryObjectReceiveStream

import ha.drivers
from ha.drivers.base import (
    ConnectionEvent,
    ConnectionState,
    Create,
    DriverEvent,
    NodeEvent,
    NodeEventKind,
    SessionKind,
)
from ha.drivers.sqlite import SqliteDriver, default_path, default_url
from ha.errors import (
    BadVersion,
    ConfigurationError,
    NodeExists,
    NoNode,
    SessionExpired,
)
from ha.testing import faults
from tests.support.backends.sqlite import SqliteBackend, sqlite_backend
from tests.support.sqlite_db import (
    CHILD,
    REPO,
    _stopped,
    child,
    lease_end,
    raw,
    session_ids,
    stop_outside_write,
)

__all__ = ("sqlite_backend",)  # the fixture, until tests/conftest.py registers the plugin

CREATED, CHANGED, DELETED = NodeEventKind.CREATED, NodeEventKind.CHANGED, NodeEventKind.DELETED

# --- helpers ------------------------------------------------------------------------------------


@contextlib.contextmanager
def recording(
    driver: SqliteDriver, path: str | None
) -> Iterator[MemoryObjectReceiveStream[DriverEvent]]:
    """Events of ``path`` (connection events if None) into a stream, while inside."""
    send, receive = anyio.create_memory_object_stream[DriverEvent](1000)
    with send, receive, driver.subscribe(path, send.send_nowait):
        yield receive


async def next_event(events: MemoryObjectReceiveStream[DriverEvent]) -> DriverEvent:
    with anyio.fail_after(20):  # a hang guard, not a latency check
        return await events.receive()


# --- child processes ----------------------------------------------------------------------------


# --- URLs and settings (no event loop) ----------------------------------------------------------


def test_url_names_the_absolute_path_and_options() -> None:
    driver = SqliteDriver.from_url(
        "sqlite:///var/tmp/my%20app/ha.db?session_timeout=3&poll_interval=0.1"
    )
    assert driver.path == "/var/tmp/my app/ha.db"
    assert driver.session_timeout == 3.0
    assert driver.capabilities.sessions is SessionKind.LEASE and driver.capabilities.cross_process
    # keywords win over the query string
    driver = SqliteDriver.from_url("sqlite:///x/ha.db?session_timeout=3", session_timeout=5)
    assert driver.session_timeout == 5.0
    assert isinstance(ha.drivers.connect("sqlite:///x/ha.db"), SqliteDriver)


@pytest.mark.parametrize(
    "url",
    [
        "sqlite://relative/ha.db",  # the host part would silently be a directory name
        "sqlite:///x/ha.db?sessiontimeout=2",
        "sqlite:///x/ha.db?session_timeout=soon",
        "sqlite:///x/ha.db?session_timeout=-1",
        "sqlite:///x/ha.db?session_timeout=1&renew_interval=0.9",  # cannot renew in time
        "sqlite:///x/ha.db?session_timeout=1&poll_interval=2",
        "sqlite:///x/ha.db?synchronous=off",
        "sqlite:///x/ha.db#frag",
        "zk:///x/ha.db",
    ],
)
def test_bad_urls_are_configuration_errors(url: str) -> None:
    with pytest.raises(ConfigurationError):
        SqliteDriver.from_url(url)


def test_bad_keyword_options_are_configuration_errors() -> None:
    with pytest.raises(ConfigurationError, match="colour"):
        SqliteDriver.from_url("sqlite:///x/ha.db", colour="blue")
    for bad in ("2", True, float("nan"), 0):
        with pytest.raises(ConfigurationError, match="session_timeout"):
            SqliteDriver("/x/ha.db", session_timeout=bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="absolute"):
        SqliteDriver("relative/ha.db")


def test_default_url_is_under_the_state_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    assert default_path() == tmp_path / "state" / "ha" / "ha.db"
    assert (tmp_path / "state" / "ha").is_dir()
    assert SqliteDriver.from_url(default_url()).path == str(tmp_path / "state" / "ha" / "ha.db")
    assert SqliteDriver.from_url("sqlite://").path == str(default_path())
    # a relative XDG_STATE_HOME is ignored, as the XDG spec says
    monkeypatch.setenv("XDG_STATE_HOME", "relative")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_path() == tmp_path / "home" / ".local" / "state" / "ha" / "ha.db"


def test_default_path_without_create_leaves_no_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a command that only reads uses (`ha status`): it must leave no trace."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    assert default_path(create=False) == tmp_path / "state" / "ha" / "ha.db"
    assert not (tmp_path / "state").exists()


# --- operations ---------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_create_get_set_delete_with_versions(sqlite_backend: SqliteBackend) -> None:
    async with sqlite_backend.driver() as driver:
        assert await driver.create("/a", b"one") == "/a"
        data, stat = await driver.get("/a")
        assert (data, stat.version, stat.ephemeral_owner, stat.num_children) == (b"one", 0, None, 0)
        with pytest.raises(NodeExists):
            await driver.create("/a")
        assert (await driver.set("/a", bytearray(b"two"), 0)).version == 1
        with pytest.raises(BadVersion) as bad:
            await driver.set("/a", b"three", 0)
        assert (bad.value.expected, bad.value.actual) == (0, 1)
        assert (await driver.set("/a", b"three")).version == 2  # -1: any version
        with pytest.raises(BadVersion):
            await driver.delete("/a", 1)
        await driver.delete("/a", 2)
        assert await driver.exists("/a") is None
        for call in (driver.get("/a"), driver.set("/a", b""), driver.delete("/a")):
            with pytest.raises(NoNode):
                await call
        with pytest.raises(ConfigurationError):
            await driver.set("/a", "text")  # type: ignore[arg-type]


@pytest.mark.anyio
async def test_creation_numbers_and_suffixes_keep_growing_across_reopening(
    sqlite_backend: SqliteBackend,
) -> None:
    async with sqlite_backend.driver() as driver:
        first = await driver.create("/q/n_", sequential=True, makepath=True)
        await driver.create("/x")
        before = (await driver.get("/x"))[1].created
        await driver.delete(first)  # the newest suffix is gone from the tree, not from the file
    async with sqlite_backend.driver() as driver:
        assert (await driver.get("/x"))[1].created == before  # kept in the file
        again = await driver.create("/q/n_", sequential=True)
        assert int(again.removeprefix("/q/n_")) > int(first.removeprefix("/q/n_"))
        await driver.create("/y")
        assert (await driver.get("/y"))[1].created > before


# --- sessions -----------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_expired_session_loses_its_nodes_and_a_new_one_opens(
    sqlite_backend: SqliteBackend,
) -> None:
    async with sqlite_backend.driver() as observer, sqlite_backend.driver() as driver:
        with recording(driver, None) as states, recording(observer, "/e") as events:
            await driver.create("/e", ephemeral=True)
            old = driver.session_id
            await faults(driver).expire()
            assert await next_event(states) == ConnectionEvent(ConnectionState.EXPIRED, old)
            connected = await next_event(states)
            assert isinstance(connected, ConnectionEvent)
            assert connected.state is ConnectionState.CONNECTED
            assert connected.session_id == driver.session_id != old
            assert [await next_event(events), await next_event(events)] == [
                NodeEvent("/e", CREATED),
                NodeEvent("/e", DELETED),
            ]
            await driver.create("/e", ephemeral=True)  # the new session works
            assert (await driver.get("/e"))[1].ephemeral_owner == connected.session_id


@pytest.mark.anyio
async def test_ephemeral_create_with_an_expired_session_fails(
    sqlite_backend: SqliteBackend,
) -> None:
    # long renewal and poll intervals: the driver cannot notice before its next write
    async with sqlite_backend.driver(session_timeout=60, poll_interval=30) as driver:
        old = driver.session_id
        with recording(driver, None) as states:
            await faults(driver).expire()
            with pytest.raises(SessionExpired):
                await driver.transaction([Create("/f"), Create("/e", ephemeral=True)])
            assert await driver.exists("/f") is None
            # that write woke the poller, which found the session gone
            assert await next_event(states) == ConnectionEvent(ConnectionState.EXPIRED, old)
            connected = await next_event(states)
            assert isinstance(connected, ConnectionEvent)
            assert connected.state is ConnectionState.CONNECTED


@pytest.mark.anyio
async def test_last_contact_is_never_later_than_the_lease_start(
    sqlite_backend: SqliteBackend,
) -> None:
    # the base.py timing assumption: expiry no earlier than last_contact + session_timeout
    async with sqlite_backend.driver(session_timeout=0.6) as driver:
        for _ in range(3):
            before = driver.last_contact
            for _ in range(2000):  # wait for a renewal
                if driver.last_contact != before:
                    break
                await anyio.sleep(0.01)
            sid = driver.session_id
            assert sid is not None
            expires = await lease_end(sqlite_backend, sid)
            # monotonic first: this offset errs high, so the check errs on the strict side
            offset = -time.monotonic() + anyio.current_time()
            assert driver.last_contact - offset <= expires - driver.session_timeout + 1e-9


@pytest.mark.anyio
async def test_a_renewal_that_commits_while_a_reaper_waits_for_the_lock_is_not_undone(
    sqlite_backend: SqliteBackend,
) -> None:
    """a reads the clock just before its lease ends; b's poller then reads that lease as run
    out and asks for the write lock; a's renewal commits first. b must judge the lease on the
    table as it is once it holds the lock, and leave a's session alone. Deterministic: trace
    callbacks (which SQLite calls as a statement starts, before it takes any lock) hold each
    thread at its step; the drivers' own loops are parked meanwhile (freeze)."""
    async with (
        sqlite_backend.driver(session_timeout=1.0) as a,
        sqlite_backend.driver(session_timeout=1.0) as b,
    ):
        faults(a).freeze()
        faults(b).freeze()
        await anyio.sleep(0.3)  # a call already in a worker thread finishes meanwhile
        sid_a, sid_b = a.session_id, b.session_id
        assert sid_a is not None and sid_b is not None
        end = await lease_end(sqlite_backend, sid_a)

        def race() -> tuple[bool, float]:
            assert a._files.bg is not None and b._files.bg is not None
            a_has_read_the_clock, a_may_write = threading.Event(), threading.Event()
            b_asks_for_the_lock, a_has_written = threading.Event(), threading.Event()

            def a_step(sql: str) -> None:
                if sql.startswith("UPDATE sessions SET expires_at"):
                    a_has_read_the_clock.set()
                    a_may_write.wait(5)

            def b_step(sql: str) -> None:
                if sql == "BEGIN IMMEDIATE":
                    b_asks_for_the_lock.set()
                    a_has_written.wait(5)

            renewal: list[tuple[bool, float]] = []
            renewer = threading.Thread(target=lambda: renewal.append(a._session._renew(sid_a)))
            reaper = threading.Thread(target=b._session._poll, args=(sid_b, []))
            a._files.bg.set_trace_callback(a_step)
            b._files.bg.set_trace_callback(b_step)
            try:
                time.sleep(max(0.0, end - time.monotonic() - 0.2))
                renewer.start()
                assert a_has_read_the_clock.wait(5)
                while time.monotonic() <= end:  # the old lease ends while a renews it
                    time.sleep(0.001)
                reaper.start()
                assert b_asks_for_the_lock.wait(5), "b did not see a's lease run out"
                a_may_write.set()
                renewer.join()
                a_has_written.set()
                reaper.join()
            finally:
                a_may_write.set()
                a_has_written.set()
                a._files.bg.set_trace_callback(None)
                b._files.bg.set_trace_callback(None)
            return renewal[0]

        alive, renewed_at = await anyio.to_thread.run_sync(race)
        assert alive and renewed_at < end, "the renewal read the clock before the lease end"
        assert await lease_end(sqlite_backend, sid_a) == renewed_at + 1.0, "b ended it"
        faults(a).thaw()
        faults(b).thaw()


@pytest.mark.anyio
async def test_held_write_lock_gives_disconnected_then_reconnected(
    sqlite_backend: SqliteBackend,
) -> None:
    async with sqlite_backend.driver(
        session_timeout=20, renew_interval=0.05, busy_timeout=0.05
    ) as driver:
        await driver.create("/e", ephemeral=True)
        sid = driver.session_id
        blocker = raw(sqlite_backend)
        try:
            with recording(driver, None) as states:
                await anyio.to_thread.run_sync(blocker.execute, "BEGIN IMMEDIATE")
                assert await next_event(states) == ConnectionEvent(
                    ConnectionState.DISCONNECTED, sid
                )
                assert not driver.connected
                await anyio.to_thread.run_sync(blocker.execute, "COMMIT")
                assert await next_event(states) == ConnectionEvent(ConnectionState.RECONNECTED, sid)
        finally:
            blocker.close()
        assert driver.connected and driver.session_id == sid
        assert await driver.exists("/e") is not None


@pytest.mark.anyio
async def test_lease_running_out_while_cut_off_gives_expired(
    sqlite_backend: SqliteBackend,
) -> None:
    async with sqlite_backend.driver(
        session_timeout=0.5, renew_interval=0.05, busy_timeout=0.05
    ) as driver:
        await driver.create("/e", ephemeral=True)
        sid = driver.session_id
        assert sid is not None
        blocker = raw(sqlite_backend)
        try:
            with recording(driver, None) as states:
                await anyio.to_thread.run_sync(blocker.execute, "BEGIN IMMEDIATE")
                assert await next_event(states) == ConnectionEvent(
                    ConnectionState.DISCONNECTED, sid
                )
                expires = await lease_end(sqlite_backend, sid)
                # the lease runs out while the driver is locked out, long enough before the
                # COMMIT that a renewal in flight then read its clock after the lease's end
                # (one reading before it, waiting out busy_timeout, would renew it in time)
                await anyio.sleep(expires - time.monotonic() + 0.2)
                assert time.monotonic() > expires
                await anyio.to_thread.run_sync(blocker.execute, "COMMIT")
                assert await next_event(states) == ConnectionEvent(ConnectionState.EXPIRED, sid)
                connected = await next_event(states)
                assert isinstance(connected, ConnectionEvent)
                assert connected.state is ConnectionState.CONNECTED
                assert connected.session_id not in (None, sid)
        finally:
            blocker.close()
        assert await driver.exists("/e") is None


# --- node events --------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_node_events_from_another_driver_in_order(sqlite_backend: SqliteBackend) -> None:
    async with sqlite_backend.driver() as watcher, sqlite_backend.driver() as writer:
        with recording(watcher, "/n") as events:
            await writer.create("/n", b"1")
            await writer.set("/n", b"2")
            await writer.delete("/n")
            await writer.create("/n")  # deleted and created again within one poll
            await writer.delete("/n")
            kinds = [(await next_event(events)) for _ in range(5)]
            assert kinds == [
                NodeEvent("/n", kind) for kind in (CREATED, CHANGED, DELETED, CREATED, DELETED)
            ]


# --- real processes -----------------------------------------------------------------------------


@pytest.mark.anyio
async def test_killed_process_loses_its_nodes_before_its_lease_ends(
    sqlite_backend: SqliteBackend,
) -> None:
    url = sqlite_backend.url() + "?session_timeout=60"
    async with contextlib.AsyncExitStack() as stack:
        member = await stack.enter_async_context(child("member", url, "a"))
        sid = int((await member.expect("ready"))[1])
        # started after the child's create, so its first event is the one under test
        observer = await stack.enter_async_context(sqlite_backend.driver())
        expires = await lease_end(sqlite_backend, sid)
        with recording(observer, "/members/a") as events:
            assert await observer.exists("/members/a") is not None
            member.signal(signal.SIGKILL)
            assert await next_event(events) == NodeEvent("/members/a", DELETED)
        # the kernel lock told: a 60 s lease was far from over
        assert time.monotonic() < expires
        assert sid not in await session_ids(sqlite_backend)


@pytest.mark.anyio
async def test_paused_process_expires_with_its_lease_and_learns_it_on_resume(
    sqlite_backend: SqliteBackend,
) -> None:
    url = sqlite_backend.url() + "?session_timeout=1"
    async with contextlib.AsyncExitStack() as stack:
        member = await stack.enter_async_context(child("member", url, "b"))
        sid = int((await member.expect("ready"))[1])
        # started after the child's create, so its first event is the one under test
        observer = await stack.enter_async_context(sqlite_backend.driver())
        with recording(observer, "/members/b") as events:
            await anyio.to_thread.run_sync(stop_outside_write, member.pid, sqlite_backend.file)
            expires = await lease_end(sqlite_backend, sid)  # fixed now: nobody renews it
            assert await next_event(events) == NodeEvent("/members/b", DELETED)
            # a stopped process keeps its kernel lock: only the lease let it go
            assert time.monotonic() > expires
        member.signal(signal.SIGCONT)
        seen = []
        while not seen or seen[-1][1] != "connected":
            seen.append(await member.expect("event"))
        states = [words[1] for words in seen]
        assert states.index("expired") < states.index("connected")
        assert seen[states.index("expired")][2] == str(sid)
        new = int(seen[-1][2])
        assert new != sid and new in await session_ids(sqlite_backend)
        assert await observer.exists("/members/b") is None


@pytest.mark.anyio
async def test_resumed_process_does_not_expire_the_sessions_that_lived_on_meanwhile(
    sqlite_backend: SqliteBackend,
) -> None:
    # The old active stops (SIGSTOP) as its reaper is about to judge the sessions it has just
    # read. Its lease runs out and another process reaps it; the survivor (the new active)
    # keeps renewing. On SIGCONT, the resumed reaper must judge by the table as it is now,
    # not by the leases it read before the pause, which have all run out by its clock.
    url = sqlite_backend.url() + "?session_timeout=1"
    async with contextlib.AsyncExitStack() as stack:
        old = await stack.enter_async_context(child("member_stopping_in_reap", url, "a"))
        old_sid = int((await old.expect("ready"))[1])
        new = await stack.enter_async_context(child("member", url, "b"))
        new_sid = int((await new.expect("ready"))[1])
        await anyio.sleep(0.3)  # a few polls: the old one's reaper has read the new session
        await old.send("stop\n")
        with anyio.fail_after(10):
            while not _stopped(old.pid):
                await anyio.sleep(0.005)
        # what the stopped reaper read of the survivor's lease is no later than this
        seen = await lease_end(sqlite_backend, new_sid)
        with anyio.fail_after(20):
            while time.monotonic() <= seen or old_sid in await session_ids(sqlite_backend):
                await anyio.sleep(0.02)
        old.signal(signal.SIGCONT)
        assert (await old.expect("event"))[1:] == ["expired", str(old_sid)]
        assert (await old.expect("event"))[1] == "connected"
        assert new_sid in await session_ids(sqlite_backend), "the survivor's session was expired"
        with contextlib.closing(raw(sqlite_backend)) as conn:
            row = conn.execute(
                "SELECT ephemeral_owner FROM nodes WHERE path = '/members/b'"
            ).fetchone()
        assert row == (new_sid,)


@pytest.mark.anyio
async def test_writer_killed_mid_transaction_leaves_a_consistent_file(
    sqlite_backend: SqliteBackend,
) -> None:
    url = sqlite_backend.url()
    rng = random.Random(4)
    for _ in range(5):
        async with child("writer", url) as writer:
            await writer.expect("wrote")
            await anyio.sleep(rng.uniform(0, 0.05))
            writer.signal(signal.SIGKILL)
            await writer.process.wait()

    def integrity() -> str:
        with contextlib.closing(raw(sqlite_backend)) as conn:
            return str(conn.execute("PRAGMA integrity_check").fetchone()[0])

    assert await anyio.to_thread.run_sync(integrity) == "ok"
    async with sqlite_backend.driver() as driver:
        count = int((await driver.get("/counter"))[0])
        assert count > 0
        assert len(await driver.children("/items")) == count  # never one without the other
        assert sorted(map(int, await driver.children("/items"))) == list(range(count))


@pytest.mark.anyio
async def test_two_processes_compare_and_set_lose_no_update(
    sqlite_backend: SqliteBackend,
) -> None:
    url = sqlite_backend.url()
    async with sqlite_backend.driver() as driver:
        await driver.create("/counter", b"0")
    async with child("increment", url, "150") as one, child("increment", url, "150") as two:
        await one.expect("ready")
        await two.expect("ready")
        await one.send("go\n")
        await two.send("go\n")
        await one.expect("done")
        await two.expect("done")
    async with sqlite_backend.driver() as driver:
        data, stat = await driver.get("/counter")
        assert int(data) == 300 and stat.version == 300


# --- files that cannot be used ------------------------------------------------------------------

# as root, permission bits bind only once these capabilities are dropped
UNPRIVILEGED = (
    ["setpriv", "--bounding-set=-dac_override,-dac_read_search,-fowner"]
    if os.geteuid() == 0
    else []
)


def open_error(path: Path, *, prefix: list[str] | None = None) -> str:
    """Open ``path`` in a child process; return 'ErrorClass message' or 'opened'."""
    url = "sqlite://" + str(path)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    command = [*(prefix or UNPRIVILEGED), sys.executable, "-c", CHILD, "open_only", url, ""]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    lines = done.stdout.splitlines()
    assert len(lines) == 1, (done.stdout, done.stderr)  # one clear line
    return lines[0].removeprefix("error ")


@pytest.fixture
def plain_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "files"
    directory.mkdir()
    return directory


def test_unwritable_file_is_access_denied(plain_dir: Path) -> None:
    path = plain_dir / "ha.db"
    assert open_error(path) == "opened"
    path.chmod(0o444)
    result = open_error(path)
    assert result.startswith("AccessDenied") and str(path) in result
    assert "permission denied" in result


def test_unwritable_directory_is_access_denied(plain_dir: Path) -> None:
    plain_dir.chmod(0o555)
    try:
        result = open_error(plain_dir / "ha.db")
    finally:
        plain_dir.chmod(0o755)
    assert result.startswith("AccessDenied") and str(plain_dir / "ha.db") in result


def test_read_only_file_system_is_access_denied(plain_dir: Path) -> None:
    path = plain_dir / "ha.db"
    assert open_error(path) == "opened"
    # a read-only bind mount, private to the child's mount namespace
    mount = f"mount --bind {plain_dir} {plain_dir} && mount -o remount,ro,bind {plain_dir}"
    probe = subprocess.run(["unshare", "-m", "sh", "-c", mount], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"cannot make a read-only mount here: {probe.stderr.decode().strip()}")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    script = f'{mount} && exec "$0" -c "$1" open_only "$2" ""'
    done = subprocess.run(
        ["unshare", "-m", "sh", "-c", script, sys.executable, CHILD, f"sqlite://{path}"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.stdout.startswith("error AccessDenied"), (done.stdout, done.stderr)
    assert "read-only file system" in done.stdout and str(path) in done.stdout


def test_text_file_is_not_an_ha_database(plain_dir: Path) -> None:
    path = plain_dir / "notes.txt"
    path.write_text("these are my notes, not a database\n" * 100)
    result = open_error(path)
    assert result.startswith("ConfigurationError") and "not an ha database" in result
    assert str(path) in result
    assert path.read_text().startswith("these are my notes")


def test_foreign_sqlite_database_is_refused_and_left_alone(plain_dir: Path) -> None:
    path = plain_dir / "app.db"
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute("CREATE TABLE users (name TEXT)")
        conn.execute("INSERT INTO users VALUES ('ada')")
        conn.commit()
    result = open_error(path)
    assert result.startswith("ConfigurationError") and "not an ha database" in result
    with contextlib.closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"  # not turned WAL
        assert conn.execute("SELECT name FROM sqlite_master").fetchall() == [("users",)]


def test_newer_schema_and_missing_directory_are_configuration_errors(plain_dir: Path) -> None:
    path = plain_dir / "ha.db"
    assert open_error(path) == "opened"
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute("PRAGMA user_version = 99")
    result = open_error(path)
    assert result.startswith("ConfigurationError") and "schema version 99" in result
    result = open_error(plain_dir / "nowhere" / "ha.db")
    assert result.startswith("ConfigurationError") and "does not exist" in result


@pytest.mark.anyio
async def test_start_errors_are_raised_in_process(tmp_path: Path) -> None:
    (tmp_path / "text").write_text("not sqlite")
    driver = SqliteDriver(tmp_path / "text")
    with pytest.raises(ConfigurationError, match="not an ha database"):
        await driver.start()
    assert driver.session_id is None


@pytest.mark.anyio
async def test_poller_behind_the_trimmed_log_resyncs_its_watches(
    sqlite_backend: SqliteBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ha.drivers.sqlite.tree as module

    monkeypatch.setattr(module, "KEEP_CHANGES", 20)
    monkeypatch.setattr(module, "TRIM_EVERY", 10)
    async with sqlite_backend.driver() as writer:
        await writer.create("/w")
        await writer.create("/busy")
        # this watcher polls only after its own writes
        async with sqlite_backend.driver(session_timeout=60, poll_interval=30) as watcher:
            with recording(watcher, "/w") as events:
                await writer.delete("/w")
                for i in range(60):  # the log is trimmed past the watcher's cursor
                    await writer.set("/busy", b"%d" % i)
                await watcher.create("/poke")
                assert await next_event(events) == NodeEvent("/w", DELETED)


@pytest.mark.anyio
async def test_deleted_file_makes_the_driver_expire_and_move_to_the_new_file(
    sqlite_backend: SqliteBackend,
) -> None:
    async with sqlite_backend.driver() as driver:
        old = driver.session_id
        await driver.create("/e", ephemeral=True)
        with recording(driver, None) as states:
            sqlite_backend.file.unlink()
            assert await next_event(states) == ConnectionEvent(ConnectionState.EXPIRED, old)
            connected = await next_event(states)
            assert isinstance(connected, ConnectionEvent)
            assert connected.state is ConnectionState.CONNECTED
        await driver.create("/again", ephemeral=True)
        async with sqlite_backend.driver() as other:  # both on the new file
            assert await other.exists("/e") is None
            stat = await other.exists("/again")
            assert stat is not None and stat.ephemeral_owner == driver.session_id


def _open_fresh(path: str, barrier: object, results: multiprocessing.Queue[str]) -> None:
    from ha.drivers.sqlite import schema

    barrier.wait()  # type: ignore[attr-defined]
    try:
        conn = schema.connect(path, 5.0, "normal")
        schema.prepare(conn, path)
        conn.close()
        results.put("ok")
    except Exception as exc:  # reported to the test, which names it
        results.put(repr(exc))


def test_processes_opening_a_new_file_together_all_succeed(tmp_path: Path) -> None:
    """Seen in CI: one of several processes starting on a new file found it 'not an ha
    database' (the schema landed between two of its reads) or 'database is locked' (the
    switch to WAL). Four processes open each of 15 new files at the same moment."""
    ctx = multiprocessing.get_context("fork")
    failures = []
    for round_ in range(15):
        path = str(tmp_path / f"new-{round_}.db")
        barrier, results = ctx.Barrier(4), ctx.Queue()
        procs = [ctx.Process(target=_open_fresh, args=(path, barrier, results)) for _ in range(4)]
        for proc in procs:
            proc.start()
        outcomes = [results.get(timeout=30) for _ in procs]
        for proc in procs:
            proc.join(timeout=30)
        failures += [o for o in outcomes if o != "ok"]
    assert failures == []


@pytest.mark.anyio
async def test_a_crashed_renewer_says_disconnected_at_once(
    sqlite_backend: SqliteBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a bug in the renew loop used to leave the driver looking connected while its lease ran out
    async with sqlite_backend.driver() as driver:
        with recording(driver, None) as states:

            def broken(sid: int) -> tuple[bool, float]:
                raise RuntimeError("a bug in the renewer")

            monkeypatch.setattr(driver._session, "_renew", broken)
            sid = driver.session_id
            assert await next_event(states) == ConnectionEvent(ConnectionState.DISCONNECTED, sid)
            assert not driver.connected
