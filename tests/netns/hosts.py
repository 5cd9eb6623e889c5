"""Hosts as network namespaces on one bridge, and the packet filters between them.

``Network()`` makes a bridge with an address of its own (the harness's, in the root namespace:
the observer, the judge and ``ha`` commands reach every host through it) and ``host(name)``
adds a namespace joined to the bridge by a veth pair, with loopback up and one address on
the bridge's /24. Names carry this process's id, so parallel runs never collide, and
``close()`` removes everything it made; it also runs at exit and on SIGTERM, and a run
killed outright is swept by the next one (``sweep``: namespaces whose creator is gone).

Faults between hosts are nftables rules inside each namespace (table ``inet ha``), rewritten
whole and atomically on every change (``Host.apply``): packets from a set of peers dropped on
the way in, to a set of peers on the way out (a one-way cut is one of the two), and random
loss. The bridge's own address is never filtered: the judge sees every host.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import functools
import ipaddress
import itertools
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ("Host", "Network", "delay_refused", "netem_refused", "refused", "sweep")

PREFIX = "hn"  # every namespace and link made here: hn<creator pid, hex>-<run><suffix>
_LOCK = Path(tempfile.gettempdir()) / "ha-netns.lock"  # one subnet pick at a time
_runs = itertools.count()


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


@contextlib.contextmanager
def _locked() -> Iterator[None]:
    with open(_LOCK, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep() -> list[str]:
    """Remove the namespaces and bridges of runs whose creator process is gone (a run killed
    by SIGKILL cannot clean up). Only names of this module's pattern are touched."""
    gone = []
    names = [line.split()[0] for line in _ip("netns", "list", check=False).stdout.splitlines()]
    links = re.findall(r"^\d+: ([^:@]+)", _ip("-o", "link", "show", check=False).stdout, re.M)
    for name in [*names, *links]:
        match = re.fullmatch(rf"{PREFIX}([0-9a-f]+)-\S+", name)
        if match is None or _alive(int(match.group(1), 16)):
            continue
        if name in names:
            _kill_inside(name)
            _ip("netns", "delete", name, check=False)
        else:
            _ip("link", "delete", name, check=False)
        gone.append(name)
    return gone


def _kill_inside(namespace: str) -> None:
    """SIGKILL what still runs in a namespace of ours (a namespace outlives its deletion
    while a process holds it)."""
    pids = subprocess.run(
        ["ip", "netns", "pids", namespace], capture_output=True, text=True, check=False
    ).stdout.split()
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid), signal.SIGCONT)
            os.kill(int(pid), signal.SIGKILL)


def _try_in_namespace(suffix: str, *command: str) -> str | None:
    """Run ``command`` in a namespace made for it: its error, or None if it worked."""
    name = f"{PREFIX}{os.getpid():x}-{suffix}"
    if _ip("netns", "add", name, check=False).returncode != 0:
        return "no network namespace to try it in"
    try:
        probe = subprocess.run(
            ["ip", "netns", "exec", name, *command], capture_output=True, text=True
        )
    finally:
        _ip("netns", "delete", name, check=False)
    return probe.stderr.strip() or "failed" if probe.returncode != 0 else None


@functools.cache
def netem_refused() -> str | None:
    """Why ``tc netem`` cannot run here (None: it can)."""
    if shutil.which("tc") is None:
        return "tc is not installed (apt-get install iproute2)"
    error = _try_in_namespace(
        "netem", "tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms"
    )
    return None if error is None else f"this kernel has no netem qdisc ({error})"


@functools.cache
def delay_refused() -> str | None:
    """Why ``Host.delay`` cannot work here (None: it can, by netem or by the delayer)."""
    if netem_refused() is None:
        return None
    if shutil.which("iptables") is None:
        return f"{netem_refused()}, and iptables is not installed for the delayer"
    rule = ("iptables", "-A", "OUTPUT", "-j", "NFQUEUE", "--queue-num", "0", "--queue-bypass")
    error = _try_in_namespace("queue", *rule)
    return None if error is None else f"{netem_refused()}, and NFQUEUE is refused: {error}"


@functools.cache
def refused() -> str | None:
    """Why hosts cannot be made here (None: they can): the tools, then a real probe (once a
    process: a probe namespace just deleted may not be made again at once)."""
    for tool, package in (("ip", "iproute2"), ("nft", "nftables")):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (apt-get install {package})"
    name = f"{PREFIX}{os.getpid():x}-probe"
    made = _ip("netns", "add", name, check=False)
    if made.returncode != 0:
        return f"`ip netns add` is not permitted here: {made.stderr.strip()}"
    try:
        nft = subprocess.run(
            ["ip", "netns", "exec", name, "nft", "add", "table", "inet", "ha"],
            capture_output=True,
            text=True,
            check=False,
        )
        if nft.returncode != 0:
            return f"nftables cannot be used in a network namespace: {nft.stderr.strip()}"
        veth = _ip("link", "add", f"{name}v", "type", "veth", "peer", "name", "p", "netns", name)
        if veth.returncode != 0:
            return f"veth pairs cannot be made: {veth.stderr.strip()}"
    except subprocess.CalledProcessError as exc:
        return f"veth pairs cannot be made: {exc.stderr.strip()}"
    finally:
        _ip("netns", "delete", name, check=False)
    return None


@dataclass
class Filter:
    """What a host's packet filter drops now."""

    deaf: set[str] = field(default_factory=set)  # packets from these addresses
    mute: set[str] = field(default_factory=set)  # packets to these addresses
    loss: int = 0  # percent of every packet in and out, at random

    def ruleset(self) -> str:
        rules_in = rules_out = ""
        if self.deaf:
            rules_in += f"ip saddr {{ {', '.join(sorted(self.deaf))} }} drop\n"
        if self.mute:
            rules_out += f"ip daddr {{ {', '.join(sorted(self.mute))} }} drop\n"
        if self.loss:
            chance = "" if self.loss >= 100 else f"numgen random mod 100 < {self.loss} "
            rules_in += f"iifname eth0 {chance}drop\n"
            rules_out += f"oifname eth0 {chance}drop\n"
        return (
            "table inet ha {}\ndelete table inet ha\n"
            "table inet ha {\n"
            f" chain in {{ type filter hook input priority 0; {rules_in} }}\n"
            f" chain out {{ type filter hook output priority 0; {rules_out} }}\n"
            "}\n"
        )


class Host:
    """One network namespace on the bridge, with its address."""

    def __init__(self, network: Network, name: str, namespace: str, address: str) -> None:
        self.network, self.name, self.namespace, self.address = network, name, namespace, address
        self.filter = Filter()
        self.delayer: subprocess.Popen[bytes] | None = None
        self._delaying = threading.Lock()  # fault tasks start and end delays from threads
        self._delays = 0

    def __repr__(self) -> str:
        return f"Host({self.name} {self.address})"

    def argv(self, command: Sequence[str]) -> list[str]:
        """``command`` run in this host (``ip netns exec`` execs it: the pid is the same)."""
        return ["ip", "netns", "exec", self.namespace, *command]

    def run(self, *command: str, stdin: str | None = None) -> str:
        done = subprocess.run(
            self.argv(command), input=stdin, capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} in {self.name}: {done.stderr.strip()}")
        return done.stdout

    def apply(self) -> None:
        """Make the packet filter say what ``self.filter`` says (one atomic nft batch)."""
        self.run("nft", "-f", "-", stdin=self.filter.ruleset())

    def delay(self, ms: float, jitter: float, seed: str) -> int:
        """Hold every packet in and out of this host for ``ms`` +- ``jitter`` milliseconds
        (and so reorder them): ``tc netem`` where the kernel has it, else ``delayer.py``
        behind iptables' NFQUEUE. Returns this delay's number, for ``undelay``; a new delay
        replaces the one in force."""
        with self._delaying:
            self._undelay()
            self._delays += 1
            if netem_refused() is None:
                self.run("tc", "qdisc", "replace", "dev", "eth0", "root", "netem", "delay",
                         f"{ms:g}ms", f"{jitter:g}ms")  # fmt: skip
                return self._delays
            delayer = Path(__file__).with_name("delayer.py")
            argv = [sys.executable, str(delayer), "0", f"{ms:g}", f"{jitter:g}", seed]
            self.delayer = subprocess.Popen(
                self.argv(argv), stdout=subprocess.PIPE, stdin=subprocess.DEVNULL
            )
            assert self.delayer.stdout is not None
            if self.delayer.stdout.readline() != b"ready\n":
                self._undelay()
                raise RuntimeError(f"the delayer on {self.name} did not start")
            for chain, way in (("OUTPUT", "-o"), ("INPUT", "-i")):
                self.run("iptables", "-A", chain, way, "eth0", "-j", "NFQUEUE",
                         "--queue-num", "0", "--queue-bypass")  # fmt: skip
            return self._delays

    def undelay(self, number: int | None = None) -> None:
        """End the delay numbered ``number`` if it is still in force (None: any)."""
        with self._delaying:
            if number is None or number == self._delays:
                self._undelay()

    def _undelay(self) -> None:
        if netem_refused() is None:
            subprocess.run(
                self.argv(["tc", "qdisc", "del", "dev", "eth0", "root"]), capture_output=True
            )
            return
        for chain in ("OUTPUT", "INPUT"):  # only the delay's rules are ever in these chains
            subprocess.run(self.argv(["iptables", "-F", chain]), capture_output=True)
        delayer, self.delayer = self.delayer, None
        if delayer is not None:
            delayer.terminate()  # it lets what it holds go first
            try:
                delayer.wait(timeout=5)
            except subprocess.TimeoutExpired:
                delayer.kill()
                delayer.wait()
            assert delayer.stdout is not None
            delayer.stdout.close()

    def pids(self) -> list[int]:
        out = _ip("netns", "pids", self.namespace, check=False).stdout
        return [int(pid) for pid in out.split()]


class Network:
    """A bridge and its hosts; ``close()`` (also at exit) removes them all."""

    def __init__(self) -> None:
        sweep()
        self.tag = f"{PREFIX}{os.getpid():x}-{next(_runs) % 36}"
        self.bridge = f"{self.tag}br"
        self.hosts: dict[str, Host] = {}
        self.closed = False
        with _locked():
            self.subnet = self._free_subnet()
            self.gateway = str(self.subnet.network_address + 1)
            try:
                _ip("link", "add", self.bridge, "type", "bridge")
                _ip("addr", "add", f"{self.gateway}/{self.subnet.prefixlen}", "dev", self.bridge)
                _ip("link", "set", self.bridge, "up")
            except subprocess.CalledProcessError as exc:
                self.close()
                raise RuntimeError(f"cannot make the bridge {self.bridge}: {exc.stderr}") from exc
        atexit.register(self.close)
        self._previous = signal.getsignal(signal.SIGTERM)
        if self._previous in (signal.SIG_DFL, None):
            with contextlib.suppress(ValueError):  # not the main thread: atexit only
                signal.signal(signal.SIGTERM, self._terminated)

    def _terminated(self, signum: int, frame: object) -> None:
        self.close()
        raise SystemExit(128 + signum)

    @staticmethod
    def _free_subnet() -> ipaddress.IPv4Network:
        """A 10.x.y.0/24 no route of this machine covers (another run's bridge)."""
        routes = _ip("-4", "route", "show", "table", "all").stdout
        used = [
            ipaddress.ip_network(m, strict=False)
            for m in re.findall(r"(\d+\.\d+\.\d+\.\d+/\d+)", routes)
        ]
        rng = random.Random()
        for _ in range(200):
            net = ipaddress.ip_network(f"10.{rng.randrange(64, 250)}.{rng.randrange(256)}.0/24")
            if not any(net.overlaps(u) for u in used):
                return net
        raise RuntimeError("no free 10.x.y.0/24 subnet for a bridge")

    def host(self, name: str) -> Host:
        """A new host on the bridge (``name``: the harness's, unique in this network)."""
        index = len(self.hosts) + 2
        namespace = f"{self.tag}{name}"
        veth = f"{self.tag}v{index}"
        address = str(self.subnet.network_address + index)
        try:
            _ip("netns", "add", namespace)
            host = Host(self, name, namespace, address)
            self.hosts[name] = host
            _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", namespace)
            _ip("link", "set", veth, "master", self.bridge, "up")
            _ip("-n", namespace, "addr", "add", f"{address}/{self.subnet.prefixlen}", "dev", "eth0")
            _ip("-n", namespace, "link", "set", "eth0", "up")
            _ip("-n", namespace, "link", "set", "lo", "up")
            host.apply()
        except (subprocess.CalledProcessError, RuntimeError) as exc:
            detail = getattr(exc, "stderr", None) or exc
            raise RuntimeError(f"cannot make host {name} ({namespace}): {detail}") from exc
        return host

    # --- faults between hosts ----------------------------------------------------------------

    def partition(self, *groups: Sequence[Host]) -> None:
        """Hosts hear only the hosts of their own group (both ways); hosts in no group are
        untouched. A host in two groups is a bridge: it hears both, they do not hear each
        other."""
        for host in self.hosts.values():
            mine = [g for g in groups if host in g]
            if not mine:
                continue
            friends = {h.address for g in mine for h in g}
            others = {h.address for g in groups for h in g} - friends
            host.filter.deaf |= others
            host.filter.mute |= others
            host.apply()

    def drop(self, source: Host, target: Host) -> None:
        """Packets from ``source`` to ``target`` are lost; the other way still works."""
        source.filter.mute.add(target.address)
        source.apply()

    def loss(self, host: Host, percent: int) -> None:
        host.filter.loss = percent
        host.apply()

    def heal(self) -> None:
        for host in self.hosts.values():
            if host.filter != Filter():
                host.filter = Filter()
                host.apply()

    # --- teardown ------------------------------------------------------------------------------

    def close(self) -> None:
        """Kill what still runs in the hosts, remove the hosts and the bridge (idempotent)."""
        if self.closed:
            return
        self.closed = True
        for host in self.hosts.values():
            host.undelay()
            _kill_inside(host.namespace)
            _ip("netns", "delete", host.namespace, check=False)
        _ip("link", "delete", self.bridge, check=False)
        with contextlib.suppress(ValueError):
            atexit.unregister(self.close)
            if signal.getsignal(signal.SIGTERM) == self._terminated:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
