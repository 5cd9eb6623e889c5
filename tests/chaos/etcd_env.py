"""The etcd backend of the process rounds: a 3-member etcd cluster and its faults.

Every contender process reaches the three members through links of its own in a fault proxy
(``tests/support/faultproxy.py``), so its network can fail alone. The faults the backend applies:

- ``member_kill``: SIGKILL a member (the raft leader most of the time), start it again later on
  its data (its leases are renewed to their full TTL, etcd's rule after a restart);
- ``member_pause``: SIGSTOP a member (the leader most of the time), SIGCONT later;
- ``member_cut``: a member (the leader most of the time) is heard by its peers no more, while
  it still hears them (its peer link paused: ``EtcdCluster``'s ``proxy``);
- ``link_pause``: a contender's links go silent both ways (a partition: its requests get no reply);
- ``link_drop``: a contender's connections close (a disconnect: it reconnects at once);
- ``expire``: the acting contender's lease is revoked (what etcd does when a lease runs out).

A revoke breaks the timing assumption on purpose (the lease ends before its TTL), so the acts of
that identity within one session timeout after it are excused (``witness.excused_acts``); its
fenced writes are still judged.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import anyio.to_thread

from tests.chaos import Fault, choose
from tests.chaos.procs import SESSION, Fleet

MEMBERS = (0, 1, 2)


def revoke_window(identity: str, began: float, done: float) -> list[tuple[str, float]]:
    """The forced expiries to excuse for a revoke sent at ``began`` and answered at ``done``.

    The lease ended at some moment in between, which can be seconds later than ``began``: a
    member without a raft leader holds the request (the harness's call gives up after 5 s, and
    even then etcd may apply it later). ``excused_acts`` excuses one session from each point, so
    points one session apart from ``began`` to ``done`` excuse every act from ``began`` to one
    session after ``done`` (seed 10106 saw a revoke take 5 s: the act it excused was judged)."""
    points = [began]
    while points[-1] + SESSION < done:
        points.append(points[-1] + SESSION)
    return [(identity, t) for t in [*points, done]]


class EtcdEnv:
    kind = "etcd"
    kinds = ("member_kill", "member_pause", "member_cut", "link_pause", "link_drop", "expire")
    live_within = 8.0  # a new raft leader (500 ms timers), a session, backoff: on 2 busy cores
    session = SESSION  # the contenders' session timeout (a supervised round draws its own)

    def __init__(self, workdir: Path) -> None:
        from tests.support.backends.etcd import EtcdCluster
        from tests.support.faultproxy import FaultProxy

        self.proxy = FaultProxy()
        self.cluster = EtcdCluster(proxy=self.proxy)  # peer links through the proxy too
        self.cluster.start_all()
        self.links: dict[str, list[Any]] = {}
        self.paused: set[int] = set()
        self.cut: set[int] = set()  # members whose peer link is paused
        self.ids: dict[int, str] = {}  # member index -> etcd's member id
        self.prefix = ""
        self._starting = anyio.Lock()

    async def begin(self, seed: int, workdir: Path) -> None:
        for links in self.links.values():  # last round's: close their ports
            for link in links:
                link.refuse()
        self.prefix = f"/chaos-{seed}-{uuid.uuid4().hex[:6]}"
        self.links = {}

    def url(self, identity: str) -> str:
        links = [self.proxy.link(("127.0.0.1", s.port)) for s in self.cluster.servers]
        self.links[identity] = links
        hosts = ",".join(link.hosts for link in links)
        return f"etcd://{hosts}{self.prefix}?session_timeout={self.session}"

    def direct_url(self, session: float) -> str:
        return f"etcd://{self.cluster.hosts}{self.prefix}?session_timeout={session}"

    def observer_url(self) -> str:
        return self.direct_url(5)

    async def apply(self, fault: Fault, fleet: Fleet, tg: anyio.abc.TaskGroup) -> str | None:
        length = fault.length * self.session
        if fault.kind in ("member_kill", "member_pause", "member_cut"):
            return await self._member(fault, length, tg)
        if fault.kind == "expire":
            return await self._expire(fleet)
        proc = fleet.target(fault.pick)
        if proc is None or proc.identity not in self.links:
            return None
        links = self.links[proc.identity]
        if fault.kind == "link_drop":
            for link in links:
                link.drop()
            return f"drop the links of {proc.identity}"
        for link in links:
            link.pause()

        async def later() -> None:
            await anyio.sleep(length)
            for link in links:
                link.accept()

        tg.start_soon(later)
        return f"pause the links of {proc.identity} {length:.2f}s"

    async def _member(self, fault: Fault, length: float, tg: anyio.abc.TaskGroup) -> str | None:
        servers = self.cluster.servers
        up = [i for i in MEMBERS if servers[i].running and i not in self.paused]
        if not up:
            return None
        leader = await anyio.to_thread.run_sync(self._leader)
        if leader in up and fault.pick < 0.6:
            member = leader
        else:  # the draw spread again over every member up
            draw = (fault.pick - 0.6) / 0.4 if fault.pick >= 0.6 else fault.pick / 0.6
            member = int(choose(draw, up))  # type: ignore[call-overload]
        role = "leader" if member == leader else "member"
        if fault.kind == "member_cut":
            link = self.cluster.peer_links[member]
            link.pause()
            self.cut.add(member)

            async def mend() -> None:
                await anyio.sleep(length)
                link.accept()
                self.cut.discard(member)

            tg.start_soon(mend)
            return f"cut etcd {role} {member + 1} off its peers {length:.2f}s"
        if fault.kind == "member_pause":
            servers[member].pause()
            self.paused.add(member)

            async def thaw() -> None:
                await anyio.sleep(length)
                self._resume(member)

            tg.start_soon(thaw)
            return f"pause etcd {role} {member + 1} {length:.2f}s"
        async with self._starting:
            servers[member].stop()

        async def restart() -> None:
            await anyio.sleep(length)
            await self._start(member)

        tg.start_soon(restart)
        return f"kill etcd {role} {member + 1}, start it after {length:.2f}s"

    async def _expire(self, fleet: Fleet) -> str | None:
        acts = [a for a in fleet.tail.read()[-50:] if a["kind"] == "act"]
        if not acts or acts[-1]["end"] < time.monotonic() - 0.5 or not acts[-1].get("sid"):
            return None
        identity, lease = acts[-1]["identity"], int(acts[-1]["sid"])
        began = time.monotonic()
        revoked = await anyio.to_thread.run_sync(self._revoke, lease)
        fleet.expiries += revoke_window(identity, began, time.monotonic())
        return f"revoke the lease of {identity}" + ("" if revoked else " (no member answered)")

    def _revoke(self, lease: int) -> bool:
        for index in MEMBERS:
            server = self.cluster.servers[index]
            if server.running and index not in self.paused:
                with contextlib.suppress(OSError, ValueError):
                    server.call("lease/revoke", {"ID": str(lease)})
                    return True
        return False

    def _leader(self) -> int | None:
        for index in MEMBERS:  # asked of a live member only: a paused one would not answer
            server = self.cluster.servers[index]
            if not server.running or index in self.paused:
                continue
            with contextlib.suppress(OSError, ValueError):
                status = server.call("maintenance/status", {})
                leader = status.get("leader")
                for other in MEMBERS:
                    if self._member_id(other) == leader:
                        return other
                return None
        return None

    def _member_id(self, index: int) -> str | None:
        if index not in self.ids:
            server = self.cluster.servers[index]
            if not server.running or index in self.paused:
                return None
            with contextlib.suppress(OSError, ValueError, KeyError):
                status = server.call("maintenance/status", {})
                self.ids[index] = status["header"]["member_id"]
        return self.ids.get(index)

    def _resume(self, member: int) -> None:
        if member in self.paused:
            self.paused.discard(member)
            server = self.cluster.servers[member]
            if server.running:
                server.resume()

    async def _start(self, member: int) -> None:
        async with self._starting:  # one start at a time
            server = self.cluster.servers[member]
            for _ in range(3):
                if server.running:
                    return
                with contextlib.suppress(RuntimeError):  # it exited at once: try again
                    await anyio.to_thread.run_sync(server.start)

    async def heal(self) -> None:
        for links in [*self.links.values(), self.cluster.peer_links]:
            for link in links:
                link.accept()
        self.cut.clear()
        for member in MEMBERS:
            self._resume(member)
            await self._start(member)
        with anyio.move_on_after(30):  # a raft leader again before the liveness clock runs
            while await anyio.to_thread.run_sync(self._leader) is None:
                await anyio.sleep(0.1)

    async def describe(self) -> str:
        leader = await anyio.to_thread.run_sync(self._leader)
        states = [
            "down"
            if not s.running
            else "paused"
            if i in self.paused
            else "cut"
            if i in self.cut
            else "up"
            for i, s in enumerate(self.cluster.servers)
        ]
        return "etcd members " + ", ".join(
            f"{i + 1}: {state}{' (leader)' if i == leader else ''}"
            for i, state in enumerate(states)
        )

    def logs(self) -> list[Path]:
        return [server.log for server in self.cluster.servers]

    def close(self) -> None:
        for member in MEMBERS:
            self._resume(member)
        self.proxy.close()
        self.cluster.remove()
