"""The backends of the process rounds and their own faults.

- ``SqliteEnv``: a fresh file per round; ``busy`` (another connection holds the write lock for
  a while), ``lockfiles`` (the session lock files under ``<db>-sessions/`` are removed).
- ``ZooKeeperEnv``: one server for the run, a fresh chroot per round, every contender process
  through its own fault-proxy link: ``link_pause`` (a frozen network), ``link_drop`` (the
  connection closes; the client reconnects).
- ``EnsembleEnv``: three servers; ``server_restart`` (SIGKILL a member, start it again later),
  and with quorum links through a proxy: ``follower_cut`` (a follower cut off from the leader,
  its clients still served) and ``leader_isolated`` (the leader cut off from both followers).
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import quote

import anyio
import anyio.abc
import anyio.to_thread

from tests.chaos import Fault, choose
from tests.chaos.procs import SESSION, Fleet


class SqliteEnv:
    kind = "sqlite"
    kinds = ("busy", "lockfiles")
    live_within = 6.0
    session = SESSION  # the contenders' session timeout (a supervised round draws its own)

    def __init__(self) -> None:
        self.file = Path()
        self._release = threading.Event()  # set: busy spells end at once

    async def begin(self, seed: int, workdir: Path) -> None:
        self.file = workdir / f"round-{seed}-{uuid.uuid4().hex[:6]}.db"
        self._release = threading.Event()

    def url(self, identity: str = "") -> str:
        return self.direct_url(self.session)

    def direct_url(self, session: float) -> str:
        """A URL that reaches the backend without a fault proxy, with this session timeout."""
        return f"sqlite://{quote(str(self.file))}?session_timeout={session}&poll_interval=0.02"

    def observer_url(self) -> str:
        return self.url()

    async def apply(self, fault: Fault, fleet: Fleet, tg: anyio.abc.TaskGroup) -> str | None:
        if fault.kind == "lockfiles":
            from tests.support.backends.sqlite import remove_lock_files

            try:
                names = remove_lock_files(self.file)
            except FileNotFoundError:
                return None
            return f"removed {len(names)} session lock files"
        length = fault.length * self.session
        tg.start_soon(anyio.to_thread.run_sync, self._hold, length)
        return f"busy: write lock held {length:.2f}s"

    def _hold(self, seconds: float) -> None:
        conn = sqlite3.connect(self.file, timeout=5.0, isolation_level=None)
        try:
            conn.execute("BEGIN IMMEDIATE")
            self._release.wait(seconds)
            conn.execute("ROLLBACK")
        except sqlite3.Error:
            pass
        finally:
            conn.close()

    async def heal(self) -> None:
        self._release.set()

    async def describe(self) -> str:
        return str(self.file)


class ZooKeeperEnv:
    kind = "zookeeper"
    kinds = ("link_pause", "link_drop")
    live_within = 6.0
    session = SESSION

    def __init__(self, workdir: Path) -> None:
        from tests.support.backends.zookeeper import ZooKeeperServer
        from tests.support.faultproxy import FaultProxy

        self.server = ZooKeeperServer(workdir / "zookeeper")
        self.server.start()
        self.server.wait_serving()
        self.proxy = FaultProxy()
        self.links: dict[str, Any] = {}
        self.chroot = ""

    async def begin(self, seed: int, workdir: Path) -> None:
        self.chroot = f"/chaos-{seed}-{uuid.uuid4().hex[:6]}"
        self.links = {}

    def url(self, identity: str) -> str:
        link = self.links[identity] = self.proxy.link(("127.0.0.1", self.server.port))
        return f"zk://{link.hosts}{self.chroot}?session_timeout={self.session}"

    def direct_url(self, session: float) -> str:
        return f"zk://{self.server.hosts}{self.chroot}?session_timeout={session}"

    def observer_url(self) -> str:
        return self.direct_url(5)

    async def apply(self, fault: Fault, fleet: Fleet, tg: anyio.abc.TaskGroup) -> str | None:
        proc = fleet.target(fault.pick)
        if proc is None:
            return None
        link = self.links[proc.identity]
        if fault.kind == "link_drop":
            link.drop()
            return f"drop the link of {proc.identity}"
        link.pause()
        length = fault.length * self.session

        async def later() -> None:
            await anyio.sleep(length)
            link.accept()

        tg.start_soon(later)
        return f"pause the link of {proc.identity} {length:.2f}s"

    async def heal(self) -> None:
        for link in self.links.values():
            link.accept()

    async def describe(self) -> str:
        return f"server {'up' if self.server.serving() else 'down'}"

    def logs(self) -> list[Path]:
        return [self.server.log]

    def close(self) -> None:
        self.proxy.close()
        self.server.stop()


class EnsembleEnv:
    kind = "ensemble"
    kinds = ("server_restart", "follower_cut", "leader_isolated")
    live_within = 8.0
    session = SESSION

    def __init__(self, workdir: Path) -> None:
        from tests.support.backends.zookeeper import ZooKeeperEnsemble

        try:  # quorum links through a fault proxy, where tests/support/backends/zookeeper.py has them
            self.ensemble = ZooKeeperEnsemble(workdir / "ensemble", proxied=True, sync_limit=50)
            self.proxied = True
        except TypeError:
            self.ensemble = ZooKeeperEnsemble(workdir / "ensemble")
            self.proxied = False
        self.ensemble.start_all()
        self.cuts: set[tuple[int, int]] = set()
        self._starting = anyio.Lock()
        self.chroot = ""

    async def begin(self, seed: int, workdir: Path) -> None:
        self.chroot = f"/chaos-{seed}-{uuid.uuid4().hex[:6]}"

    def url(self, identity: str = "") -> str:
        return self.direct_url(self.session)

    def direct_url(self, session: float) -> str:
        return f"{self.ensemble.url(self.chroot)}?session_timeout={session}"

    def observer_url(self) -> str:
        return self.direct_url(5)

    async def apply(self, fault: Fault, fleet: Fleet, tg: anyio.abc.TaskGroup) -> str | None:
        length = fault.length * self.session
        if fault.kind == "server_restart":
            member = int(choose(fault.pick, [0, 1, 2]))  # type: ignore[call-overload]
            async with self._starting:  # not while it is being started again
                if not self.ensemble.servers[member].running:
                    return None
                self.ensemble.stop(member)

            async def restart() -> None:
                await anyio.sleep(length)
                await self._start(member)

            tg.start_soon(restart)
            return f"restart server {member + 1} after {length:.2f}s"
        if not self.proxied:
            return None
        try:
            leader = await anyio.to_thread.run_sync(self.ensemble.leader)
        except RuntimeError:
            return None
        others = [i for i in range(3) if i != leader]
        home = None
        if fault.kind == "follower_cut":
            # most of the time the follower the active is connected to
            sid = fleet.acting_session()
            home = await anyio.to_thread.run_sync(self._home, sid) if sid else None
            follower = home if home in others and fault.pick < 0.7 else choose(fault.pick, others)
            pairs = [(leader, int(follower))]  # type: ignore[call-overload]
        else:
            pairs = [(leader, i) for i in others]
        for pair in pairs:
            self.ensemble.cut(*pair)
            self.cuts.add(pair)

        async def later() -> None:
            await anyio.sleep(length)
            for pair in pairs:
                self.ensemble.heal(*pair)
                self.cuts.discard(pair)

        tg.start_soon(later)
        where = f"; the active is on server {home + 1}" if home is not None else ""
        return f"{fault.kind}: cut {[(a + 1, b + 1) for a, b in pairs]} {length:.2f}s{where}"

    async def heal(self) -> None:
        for pair in list(self.cuts):
            self.ensemble.heal(*pair)
        self.cuts.clear()
        for member in range(3):
            await self._start(member)
        with anyio.move_on_after(30):  # a quorum again before the liveness clock runs
            while True:
                try:
                    await anyio.to_thread.run_sync(self.ensemble.leader)
                    break
                except RuntimeError:
                    await anyio.sleep(0.1)

    def _home(self, sid: int) -> int | None:
        """The member a client session is connected to."""
        from tests.support.backends.zookeeper import four_letter

        for member, server in enumerate(self.ensemble.servers):
            if f"sid=0x{sid:x}," in four_letter(server.port, "cons"):
                return member
        return None

    async def _start(self, member: int) -> None:
        async with self._starting:  # one start at a time: two would fight over the ports
            for _ in range(3):
                if self.ensemble.servers[member].running:
                    return
                with contextlib.suppress(RuntimeError):  # it exited: start it again
                    await anyio.to_thread.run_sync(self.ensemble.start, member)

    async def describe(self) -> str:
        modes = [await anyio.to_thread.run_sync(self.ensemble.mode, i) for i in range(3)]
        return "servers " + ", ".join(f"{i + 1}: {m or 'down'}" for i, m in enumerate(modes))

    def logs(self) -> list[Path]:
        return [server.log for server in self.ensemble.servers]

    def close(self) -> None:
        self.ensemble.stop_all()
