"""The backends of the network rounds: servers and contenders on hosts, and the nemeses.

Every env is a ``tests.chaos.procs.Env``: ``process_round`` runs three contenders (slots a, b,
c), each on a host of its own (``launch``), and asks the env for the faults it owns. The
contenders' own faults (``kill``, ``pause``: SIGKILL, SIGSTOP for a while; ``restart``) are the
fleet's. The env's:

- ``partition``: the servers split into a majority and a minority (one member: the leader
  most of the time), each contender drawn to one side;
- ``bridge``: two members cannot hear each other, the third hears both (Jepsen's bridge);
  contenders drawn to either side;
- ``isolate``: a contender (the active most of the time) hears no one, no one hears it;
- ``one_way``: packets one way only are lost (the active to a member, or a member, the leader
  most of the time, to every other host: it hears, it is not heard);
- ``loss``: a host (the active's, or a member's) loses 20-60 % of its packets both ways;
- ``delay``: every packet in and out of a host held 50-400 ms, with a jitter of half that,
  so they also overtake each other (``Host.delay``: ``tc netem``, or where the kernel has no
  netem, as here, ``delayer.py`` behind iptables' NFQUEUE);
- ``member_pause``, ``member_kill`` (SIGSTOP; SIGKILL and a start later on its data);
- clocks, drawn for every contender process when it starts (``Clocks``).

Network faults are nftables rules inside the hosts' namespaces (``hosts.Network``); each lasts
its length and the filters are then recomputed from the faults still running. ``heal`` lifts
everything and waits for the servers to have a leader again.
"""

from __future__ import annotations

import contextlib
import glob
import os
import random
import shutil
import subprocess
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import anyio.to_thread

from tests.chaos import Fault, choose
from tests.chaos.procs import SESSION, Fleet
from tests.netns import servers
from tests.netns.hosts import Host, Network, delay_refused

__all__ = ("ENVS", "Clocks", "NetEnv")

# Debian's libfaketime (apt-get install faketime), under the machine's multiarch directory
LIBFAKETIME = next(iter(sorted(glob.glob("/usr/lib/*/faketime/libfaketime.so.1"))), "")
SLOTS = "abc"


class Clocks:
    """Each contender process's clocks, drawn from the round's seed when it starts:

    - ``host``: the host's clocks;
    - ``monotonic``: CLOCK_MONOTONIC offset by hours to days (a time namespace of its own,
      ``unshare --time``, joined with ``nsenter``: the kernel's own per-process clock, as in
      a container restored by CRIU; across machines monotonic clocks differ anyway);
    - ``wall``: the wall clock of its host (a file per host, ``wall``), minutes off the
      machine's, which ``jump`` steps (as NTP does) and ``strobe`` flips back and forth;
      libfaketime with FAKETIME_DONT_FAKE_MONOTONIC: CLOCK_MONOTONIC stays the kernel's.

    libfaketime 0.9.10 (Debian 12) has two defects worked around here: faking CLOCK_MONOTONIC
    too makes timed waits on it hang (a thread's ``Event.wait(0.3)`` waited for the offset),
    and with FAKETIME_DONT_FAKE_MONOTONIC ``clock_nanosleep`` fails with EINVAL, so such a
    contender sleeps with ``Event.wait`` instead (``HA_SLEEP_BY_WAIT``, contender.py).

    ``ha`` decides on durations of its own monotonic clock only (a Kubernetes observer times a
    peer's Lease from when it saw it change, never by ``renewTime``): none of these may change
    a verdict. The witness reads the host's clock whatever these say (``host_clock``).
    """

    def __init__(self, rng: random.Random, directory: Path) -> None:
        self.rng, self.directory = rng, directory
        self.drawn: Counter[str] = Counter()
        self.notes: list[str] = []
        self.holders: list[subprocess.Popen[bytes]] = []
        self.walls: dict[str, tuple[Path, int]] = {}  # host name -> its clock file, offset
        self.users: dict[str, str] = {}  # identity -> the host whose wall clock it reads
        self.faketime = bool(LIBFAKETIME)
        # supervised rounds: a COMMAND's heartbeats are judged against the others' on one
        # clock, and it runs with its supervisor's clocks (and libfaketime's broken sleep)
        self.host_only = False
        from tests.support.namespaces import refused

        self.timens = refused("--time") is None and shutil.which("nsenter") is not None

    def wall(self, host: str) -> Path:
        """The file holding ``host``'s wall clock offset (made on first use)."""
        if host not in self.walls:
            offset = int(self.rng.choice([1, -1]) * self.rng.uniform(30, 900))
            path = self.directory / f"clock-{host}-{uuid.uuid4().hex[:6]}"
            self.walls[host] = (path, offset)
            self.set_wall(host, offset)
            self.notes.append(f"host {host}: wall clock {offset:+d} s")
        return self.walls[host][0]

    def set_wall(self, host: str, offset: float) -> None:
        path = self.walls[host][0]
        temporary = path.with_name(path.name + ".new")
        temporary.write_text(f"{int(offset):+d}s\n")
        os.replace(temporary, path)  # a reader sees the old offset or the new, never half

    def draw(self, identity: str, host: str) -> tuple[list[str], dict[str, str]]:
        """(nsenter options, environment) for a new process of ``identity`` on ``host``."""
        kinds = ["host", "host"]
        if not self.host_only:
            kinds += ["monotonic"] * self.timens * 2 + ["wall"] * self.faketime * 2
        kind = self.rng.choice(kinds)
        self.drawn[kind] += 1
        if kind == "monotonic":
            uptime = float(Path("/proc/uptime").read_text().split()[0])
            if self.rng.random() < 0.5:
                offset = int(self.rng.uniform(3600, 5 * 86400))  # ahead by hours to days
            else:  # behind, by up to most of the uptime: the clock must stay positive
                offset = -int(self.rng.uniform(0.1, 0.9) * uptime)
            holder = subprocess.Popen(
                ["unshare", "--time", f"--monotonic={offset}", "--fork", "--kill-child"]
                + ["sleep", "infinity"],
                stdin=subprocess.DEVNULL,
            )
            self.holders.append(holder)
            child = _child_of(holder.pid)
            self.notes.append(f"{identity}: monotonic clock {offset:+d} s")
            return [f"--time=/proc/{child}/ns/time"], {}
        if kind == "wall":
            self.users[identity] = host
            self.notes.append(f"{identity}: the wall clock of host {host}")
            return [], {
                "LD_PRELOAD": LIBFAKETIME,
                "FAKETIME_TIMESTAMP_FILE": str(self.wall(host)),
                "FAKETIME_NO_CACHE": "1",
                "FAKETIME_DONT_FAKE_MONOTONIC": "1",
                "FAKETIME_FORCE_MONOTONIC_FIX": "1",
                "HA_SLEEP_BY_WAIT": "1",
            }
        return [], {}

    def close(self) -> None:
        for holder in self.holders:
            with contextlib.suppress(ProcessLookupError):
                holder.kill()
            holder.wait()
        self.holders = []
        for path, _ in self.walls.values():
            path.unlink(missing_ok=True)


def _child_of(pid: int, timeout: float = 5.0) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
            if children:
                return int(children[0])
        time.sleep(0.005)
    raise RuntimeError(f"unshare (pid {pid}) started no child")


class NetEnv:
    """The part every network backend shares: hosts, contenders, network nemeses."""

    kind = "netns"
    live_within = 10.0  # a new server leader, a session, backoff: on 2 busy cores
    session = SESSION
    weights: dict[str, int] = {}
    supervised = False  # ha run rounds: the host's clocks only (Clocks.host_only)

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.home = workdir / f"{self.kind}-{uuid.uuid4().hex[:6]}"  # servers' data: removed
        self.network = Network()
        self.members: list[servers.Daemon] = []
        self.contenders: dict[str, Host] = {}
        self.clocks = Clocks(random.Random(0), workdir)
        self.faults: dict[int, Callable[[], None]] = {}  # network faults in force, by id
        self._ids = iter(range(1 << 30))
        self._lock = anyio.Lock()  # one member start at a time

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(self.weights)

    def contender_host(self, slot: str) -> Host:
        if slot not in self.contenders:
            self.contenders[slot] = self.network.host(f"c{slot}")
        return self.contenders[slot]

    async def begin(self, seed: int, workdir: Path) -> None:
        self.clocks.close()
        self.clocks = Clocks(random.Random(f"{self.kind}-{seed}-clocks"), workdir)
        self.clocks.host_only = self.supervised
        for slot in SLOTS:
            self.contender_host(slot)

    async def launch(
        self, slot: str, identity: str, argv: list[str], environ: dict[str, str]
    ) -> tuple[list[str], dict[str, str]]:
        """Run ``argv`` on the slot's host, with the clocks drawn for it."""
        host = self.contender_host(slot)
        options, clock_env = self.clocks.draw(identity, host.name)
        prefix = ["nsenter", f"--net=/run/netns/{host.namespace}", *options, "--"]
        return [*prefix, *argv], {**environ, **clock_env, "HA_WITNESS_HOST_CLOCK": "1"}

    # --- faults ----------------------------------------------------------------------------------

    def leader(self) -> int | None:
        return None

    def member_hosts(self) -> list[Host]:
        return [m.host for m in self.members]

    async def apply(self, fault: Fault, fleet: Fleet, tg: anyio.abc.TaskGroup) -> str | None:
        length = fault.length * self.session
        rng = random.Random(f"{fault}")  # the fault's own draws: the seed fixes them
        if fault.kind in ("member_pause", "member_kill"):
            return await self._member(fault, length, tg)
        if fault.kind in ("clock_jump", "clock_strobe"):
            return self._clock(fault, fleet, length, rng, tg)
        active = fleet.target(fault.pick)
        active_host = self.contenders[active.slot] if active else None
        leader = await anyio.to_thread.run_sync(self.leader) if self.members else None
        members = self.member_hosts()
        first = members[leader] if leader is not None and fault.pick < 0.6 else None
        sides = "contenders " + "".join(SLOTS)
        if fault.kind == "partition":
            minority = [first or rng.choice(members)]
            majority = [h for h in members if h not in minority]
            small, big = list(minority), list(majority)
            for host in self.contenders.values():
                (small if rng.random() < 0.5 else big).append(host)
            sides = f"{_names(small)} | {_names(big)}"
            action = _partial(self.network.partition, small, big)
        elif fault.kind == "bridge":
            middle = first or rng.choice(members)
            a, b = [h for h in members if h is not middle]
            left, right = [a, middle], [b, middle]
            for host in self.contenders.values():
                (left if rng.random() < 0.5 else right).append(host)
            sides = f"{_names(left)} | {_names(right)} (bridge {middle.name})"
            action = _partial(self.network.partition, left, right)
        elif fault.kind == "isolate":
            if active_host is None:
                return None
            rest = [h for h in self.network.hosts.values() if h is not active_host]
            sides = f"{active_host.name} alone"
            action = _partial(self.network.partition, [active_host], rest)
        elif fault.kind == "one_way":
            if fault.pick < 0.5 and active_host is not None and members:
                target = members[leader] if leader is not None else rng.choice(members)
                pairs = [(active_host, target)]
            else:
                source = first or (rng.choice(members) if members else active_host)
                if source is None:
                    return None
                pairs = [(source, h) for h in self.network.hosts.values() if h is not source]
            sides = ", ".join(f"{s.name}->{t.name}" for s, t in pairs[:3])
            sides += " ..." if len(pairs) > 3 else ""

            def action() -> None:
                for source, target in pairs:
                    self.network.drop(source, target)

        elif fault.kind == "loss":
            pool = [h for h in [active_host, first] if h is not None] or members
            host = rng.choice(pool)
            percent = rng.choice([20, 40, 60])
            sides = f"{host.name} {percent}%"
            action = _partial(self.network.loss, host, percent)
        elif fault.kind == "delay":
            pool = [h for h in [active_host, first] if h is not None] or members
            host = rng.choice(pool)
            ms = rng.choice([50, 150, 400])
            try:
                number = await anyio.to_thread.run_sync(host.delay, ms, ms / 2, str(fault))
            except (RuntimeError, OSError) as exc:  # a nemesis that fails is reported, not fatal
                return f"delay {host.name} failed: {exc}"

            async def undelay() -> None:
                await anyio.sleep(length)
                await anyio.to_thread.run_sync(host.undelay, number)

            tg.start_soon(undelay)
            return f"delay {host.name} {ms}+-{ms // 2}ms (reordering) for {length:.2f}s"
        else:
            raise ValueError(f"{self.kind} has no fault {fault.kind}")
        key = next(self._ids)
        self.faults[key] = action
        action()
        tg.start_soon(self._lift, key, length)
        return f"{fault.kind} {sides} for {length:.2f}s"

    def _clock(
        self,
        fault: Fault,
        fleet: Fleet,
        length: float,
        rng: random.Random,
        tg: anyio.abc.TaskGroup,
    ) -> str | None:
        """Step a host's wall clock (the active's most of the time), or strobe it: flip it
        between its offset and one far off every 10-100 ms for the fault's length."""
        users = self.clocks.users
        hosts = sorted({users[p.identity] for p in fleet.live() if p.identity in users})
        if not hosts:
            return None
        active = fleet.target(fault.pick)
        mine = self.clocks.users.get(active.identity) if active else None
        host = mine if mine and fault.pick < 0.7 else rng.choice(hosts)
        base = self.clocks.walls[host][1]
        step = int(rng.choice([1, -1]) * rng.uniform(5, 600))
        if fault.kind == "clock_jump":
            self.clocks.walls[host] = (self.clocks.walls[host][0], base + step)
            self.clocks.set_wall(host, base + step)
            return f"wall clock of host {host} steps {step:+d} s"

        async def strobe() -> None:
            end = anyio.current_time() + length
            far = True
            while anyio.current_time() < end:
                self.clocks.set_wall(host, base + step if far else base)
                far = not far
                await anyio.sleep(rng.uniform(0.01, 0.1))
            self.clocks.set_wall(host, base)

        tg.start_soon(strobe)
        return f"wall clock of host {host} strobes by {step:+d} s for {length:.2f}s"

    async def _lift(self, key: int, length: float) -> None:
        await anyio.sleep(length)
        if self.faults.pop(key, None) is not None:
            self._refilter()

    def _refilter(self) -> None:
        self.network.heal()
        for action in self.faults.values():
            action()

    async def _later(self, delay: float, action: Callable[[], Any]) -> None:
        await anyio.sleep(delay)
        action()

    async def _member(self, fault: Fault, length: float, tg: anyio.abc.TaskGroup) -> str | None:
        up = [i for i, m in enumerate(self.members) if m.running and not m.paused]
        if not up:
            return None
        leader = await anyio.to_thread.run_sync(self.leader)
        if leader in up and fault.pick < 0.6:
            index = leader
        else:
            draw = (fault.pick - 0.6) / 0.4 if fault.pick >= 0.6 else fault.pick / 0.6
            index = int(choose(draw, up))  # type: ignore[call-overload]
        member = self.members[index]
        role = "leader" if index == leader else "member"
        if fault.kind == "member_pause":
            member.pause()
            tg.start_soon(self._later, length, member.resume)
            return f"pause {role} {member.host.name} {length:.2f}s"
        async with self._lock:
            await anyio.to_thread.run_sync(member.kill)

        async def restart() -> None:
            await anyio.sleep(length)
            await self._start(index)

        tg.start_soon(restart)
        return f"kill {role} {member.host.name}, start it after {length:.2f}s"

    async def _start(self, index: int) -> None:
        async with self._lock:
            member = self.members[index]
            for _ in range(3):
                if member.running:
                    return
                with contextlib.suppress(RuntimeError):  # it exited at once: again
                    await anyio.to_thread.run_sync(member.start)

    async def heal(self) -> None:
        self.faults.clear()
        self.network.heal()
        for host in self.network.hosts.values():
            await anyio.to_thread.run_sync(host.undelay)
        for index, member in enumerate(self.members):
            member.resume()
            await self._start(index)
        with anyio.move_on_after(30):  # a leader again before the liveness clock runs
            while self.members and await anyio.to_thread.run_sync(self.leader) is None:
                await anyio.sleep(0.1)

    async def describe(self) -> str:
        leader = await anyio.to_thread.run_sync(self.leader) if self.members else None
        states = [
            f"{m.host.name}: {'down' if not m.running else 'paused' if m.paused else 'up'}"
            + (" (leader)" if i == leader else "")
            for i, m in enumerate(self.members)
        ]
        return f"{self.kind}: " + ", ".join(states + self.clocks.notes)

    def start_members(self) -> None:
        try:
            for member in self.members:
                member.start(wait=False)  # each waits for a quorum before it answers
            for member in self.members:
                member.wait()
        except BaseException:
            self.close()
            raise

    def close(self, keep_logs: Path | None = None) -> None:
        """Stop the servers and remove their data; ``keep_logs``: copy the servers' logs
        there first (a round broke: when a member expired a session, say, is in them)."""
        self.clocks.close()
        for member in self.members:
            with contextlib.suppress(Exception):
                member.kill()
        self.network.close()
        if keep_logs is not None:
            for log in self.home.rglob("*.log"):
                target = keep_logs / log.relative_to(self.home)
                target.parent.mkdir(parents=True, exist_ok=True)
                with contextlib.suppress(OSError):
                    shutil.copyfile(log, target)
        shutil.rmtree(self.home, ignore_errors=True)


def _partial(function: Callable[..., None], *args: Any) -> Callable[[], None]:
    return lambda: function(*args)


def _names(hosts: list[Host]) -> str:
    return ",".join(h.name for h in hosts)


NETWORK = {"isolate": 2, "one_way": 2, "loss": 1}
CLOCK = {"clock_jump": 1, "clock_strobe": 1}


def _with_delay(weights: dict[str, int]) -> dict[str, int]:
    return {**weights, "delay": 2} if delay_refused() is None else weights


class ZooKeeperNetEnv(NetEnv):
    kind = "netns-zookeeper"

    def __init__(self, workdir: Path) -> None:
        super().__init__(workdir)
        self.weights = _with_delay(
            {**NETWORK, **CLOCK, "partition": 2, "bridge": 1, "member_pause": 1, "member_kill": 1}
        )
        hosts = [self.network.host(f"z{i}") for i in (1, 2, 3)]
        self.members = servers.zookeeper_ensemble(hosts, self.home)
        self.start_members()
        self.chroot = ""

    def leader(self) -> int | None:
        modes = [servers.zookeeper_mode(m) for m in self.members]
        return modes.index("leader") if "leader" in modes else None

    async def begin(self, seed: int, workdir: Path) -> None:
        await super().begin(seed, workdir)
        self.chroot = f"/netns-{seed}-{uuid.uuid4().hex[:6]}"

    def _hosts(self) -> str:
        return ",".join(f"{m.host.address}:{servers.ZK_CLIENT}" for m in self.members)

    def url(self, identity: str = "") -> str:
        return self.direct_url(self.session)

    def direct_url(self, session: float) -> str:
        return f"zk://{self._hosts()}{self.chroot}?session_timeout={session}"

    def observer_url(self) -> str:
        return self.direct_url(5)


class EtcdNetEnv(NetEnv):
    kind = "netns-etcd"

    def __init__(self, workdir: Path) -> None:
        super().__init__(workdir)
        self.weights = _with_delay(
            {**NETWORK, **CLOCK, "partition": 2, "bridge": 1, "member_pause": 1, "member_kill": 1}
        )
        hosts = [self.network.host(f"e{i}") for i in (1, 2, 3)]
        self.members = servers.etcd_cluster(hosts, self.home)
        self.start_members()
        self.prefix = ""

    def leader(self) -> int | None:
        return servers.etcd_leader(self.members)

    async def begin(self, seed: int, workdir: Path) -> None:
        await super().begin(seed, workdir)
        self.prefix = f"/netns-{seed}-{uuid.uuid4().hex[:6]}"

    def _hosts(self, first: int = 0) -> str:
        ends = [f"{m.host.address}:{servers.ETCD_CLIENT}" for m in self.members]
        return ",".join(ends[first:] + ends[:first])

    def url(self, identity: str = "") -> str:
        # the driver talks to its first endpoint: each slot starts on another member
        first = SLOTS.index(identity[0]) if identity[:1] in SLOTS else 0
        return f"etcd://{self._hosts(first)}{self.prefix}?session_timeout={self.session}"

    def direct_url(self, session: float) -> str:
        return f"etcd://{self._hosts()}{self.prefix}?session_timeout={session}"

    def observer_url(self) -> str:
        return self.direct_url(5)


class KubernetesNetEnv(NetEnv):
    """The FAKE API server (no real kube-apiserver runs here: tests/support/kubeapi) on a host."""

    kind = "netns-kubernetes"

    def __init__(self, workdir: Path) -> None:
        super().__init__(workdir)
        self.weights = _with_delay({**NETWORK, **CLOCK, "member_pause": 1, "member_kill": 1})
        self.api = servers.kube_api(self.network.host("k"), self.home)
        self.members = [self.api]
        self.start_members()
        self.namespace = ""

    def leader(self) -> int | None:
        return 0 if self.api.running and not self.api.paused else None

    async def begin(self, seed: int, workdir: Path) -> None:
        await super().begin(seed, workdir)
        self.namespace = f"netns-{seed}-{uuid.uuid4().hex[:6]}"
        await anyio.to_thread.run_sync(self._namespace)

    def _namespace(self) -> None:
        import json
        import urllib.request

        body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self.namespace}}
        request = urllib.request.Request(
            f"{self._server()}/api/v1/namespaces",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10):
            pass

    def _server(self) -> str:
        return f"http://{self.api.host.address}:{servers.KUBE_PORT}"

    def url(self, identity: str = "") -> str:
        return self.direct_url(self.session)

    def direct_url(self, session: float) -> str:
        from tests.support.backends.kubernetes import write_kubeconfig

        config = write_kubeconfig(self.workdir, self._server(), self.namespace)
        return f"k8s://{self.namespace}/netns?kubeconfig={config}&session_timeout={session}"

    def observer_url(self) -> str:
        return self.direct_url(5) + "&connect_timeout=30"


class SqliteNetEnv(NetEnv):
    """One host (a file has no network): the contenders' clocks, kills and pauses only."""

    kind = "netns-sqlite"

    def __init__(self, workdir: Path) -> None:
        super().__init__(workdir)
        self.weights = dict(CLOCK)  # its processes share one host: one wall clock
        self.host = self.network.host("s")
        self.file = Path()

    def contender_host(self, slot: str) -> Host:
        return self.host

    async def begin(self, seed: int, workdir: Path) -> None:
        await super().begin(seed, workdir)
        self.file = workdir / f"netns-{seed}-{uuid.uuid4().hex[:6]}.db"

    def url(self, identity: str = "") -> str:
        return self.direct_url(self.session)

    def direct_url(self, session: float) -> str:
        from urllib.parse import quote

        return f"sqlite://{quote(str(self.file))}?session_timeout={session}&poll_interval=0.02"

    def observer_url(self) -> str:
        return self.direct_url(self.session)


ENVS: dict[str, Callable[[Path], NetEnv]] = {
    "zookeeper": ZooKeeperNetEnv,
    "etcd": EtcdNetEnv,
    "kubernetes": KubernetesNetEnv,
    "sqlite": SqliteNetEnv,
}
