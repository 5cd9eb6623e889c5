"""ZooKeeper for the tests: Debian's ZooKeeper 3.8 run as plain java processes on loopback.

Fixtures:

- ``zookeeper_server`` (session): one standalone server, started once, killed at the end.
- ``zookeeper_backend``: a ``tests.support.backends.Backend`` on that server, with a fresh chroot per test.
- ``zookeeper_ensemble``: a 3-server ensemble (shared by a module), for server-loss tests; every
  member stopped by a test is started again before the next test.
- ``zookeeper_proxied_ensemble``: a private 3-server ensemble whose quorum links (peer and
  election ports) go through a fault proxy, so that a member can be cut off from another while
  its clients still reach it; a high syncLimit (5 s) lets a cut-off follower go on serving past
  the tests' session timeouts, as stock ZooKeeper (10 s) does.
- ``zookeeper_server_factory``: private servers a test may restart at will.

``expire_session(driver, hosts)`` forces a driver's session to expire through the given
server address, for drivers that talk to it through a fault proxy (otherwise use
``ha.testing.faults(driver).expire()``).

Tests are skipped, with the reason, only when java or Debian's zookeeper.jar is missing; a
server that is installed but does not start is an error.
"""

from __future__ import annotations

import itertools
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ha.testing import faults
from tests.support.ports import free_port

__all__ = (
    "ZooKeeperBackend",
    "ZooKeeperEnsemble",
    "ZooKeeperNet",
    "ZooKeeperServer",
    "expire_session",
    "four_letter",
    "free_port",
    "zookeeper_backend",
    "zookeeper_ensemble",
    "zookeeper_ensemble_shared",
    "zookeeper_proxied_ensemble",
    "zookeeper_server",
    "zookeeper_server_factory",
)

ZK_JAR = "/usr/share/java/zookeeper.jar"
LOG_JAR = "/usr/share/java/slf4j-simple.jar"
TICK_MS = 100  # sessions may then be as short as 0.2 s
MAX_SESSION_MS = 20_000  # explicit: the default cap (20 ticks) would be 2 s
JVM_OPTS = ["-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto"]


def missing_reason() -> str | None:
    """Why ZooKeeper cannot run here, or None if it can."""
    if shutil.which("java") is None:
        return "java is not installed (apt-get install openjdk-17-jre-headless)"
    if not os.path.exists(ZK_JAR):
        return f"{ZK_JAR} is missing (apt-get install zookeeper)"
    return None


def four_letter(port: int, command: str, timeout: float = 1.0, host: str = "127.0.0.1") -> str:
    """Send a four-letter-word command (ruok, srvr, mntr, cons); '' if the server is not there."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(command.encode())
            chunks = []
            while chunk := sock.recv(4096):
                chunks.append(chunk)
            return b"".join(chunks).decode(errors="replace")
    except OSError:
        return ""


class ZooKeeperServer:
    """One ZooKeeper server process: its own zoo.cfg and data directory under ``directory``.

    ``stop()`` kills it by pid (SIGKILL, like a crash; the data directory survives, so ``start()``
    brings back the same tree and sessions that have not timed out yet).
    """

    def __init__(
        self,
        directory: Path,
        *,
        port: int | None = None,
        server_id: int | None = None,
        peers: dict[int, tuple[int, int]] | None = None,
        sync_limit: int = 10,
    ) -> None:
        self.directory = directory
        self.port = port or free_port()
        self.server_id = server_id
        self.peers = peers  # ensemble member id -> (quorum port, election port)
        self.sync_limit = sync_limit  # ticks a follower serves on without hearing its leader
        self.process: subprocess.Popen[bytes] | None = None
        self.data_dir = directory / "data"
        self.config = directory / "zoo.cfg"
        self.log = directory / "server.log"
        self._write_config()

    @property
    def hosts(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _write_config(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        lines = [
            f"tickTime={TICK_MS}",
            "initLimit=20",
            f"syncLimit={self.sync_limit}",
            f"dataDir={self.data_dir}",
            f"clientPort={self.port}",
            "clientPortAddress=127.0.0.1",
            f"maxSessionTimeout={MAX_SESSION_MS}",
            "admin.enableServer=false",
            "4lw.commands.whitelist=ruok,srvr,mntr,cons",
            "maxClientCnxns=200",
        ]
        if self.peers:
            assert self.server_id is not None
            (self.data_dir / "myid").write_text(f"{self.server_id}\n")
            for member, (quorum, election) in sorted(self.peers.items()):
                lines.append(f"server.{member}=127.0.0.1:{quorum}:{election}")
        self.config.write_text("\n".join(lines) + "\n")

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self) -> None:
        """Launch the java process (returns at once; see ``wait_serving``)."""
        if self.running:
            return
        command = [
            "java",
            *JVM_OPTS,
            "-Dzookeeper.admin.enableServer=false",
            "-cp",
            f"{ZK_JAR}:{LOG_JAR}",
            "org.apache.zookeeper.server.quorum.QuorumPeerMain",
            str(self.config),
        ]
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )

    def serving(self) -> bool:
        """Whether the server answers requests (ruok says imok even without a quorum)."""
        return "Mode:" in four_letter(self.port, "srvr", timeout=0.5)

    def wait_serving(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.running:
                raise RuntimeError(f"ZooKeeper exited; see {self.log}:\n{self._log_tail()}")
            if four_letter(self.port, "ruok", timeout=0.5) == "imok" and self.serving():
                return
            time.sleep(0.05)
        raise RuntimeError(f"ZooKeeper on port {self.port} not serving after {timeout} s")

    def stop(self) -> None:
        """Kill the process by pid and reap it."""
        if self.process is None:
            return
        process, self.process = self.process, None
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=10)

    def _log_tail(self) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-20:])
        except OSError:
            return ""


def _start_standalone(directory: Path) -> ZooKeeperServer:
    reason = missing_reason()
    if reason:
        pytest.skip(f"ZooKeeper tests need a local ZooKeeper: {reason}")
    server = ZooKeeperServer(directory)
    server.start()
    try:
        server.wait_serving()
    except BaseException:
        server.stop()
        raise
    return server


# Shared by every copy of the session fixture: test modules may import these fixtures while the
# plugin is also registered, and there should still be one server per test session.
_shared: ZooKeeperServer | None = None


@pytest.fixture(scope="session")
def zookeeper_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    global _shared
    if _shared is not None and _shared.running:
        yield _shared
        return
    server = _start_standalone(tmp_path_factory.mktemp("zookeeper"))
    _shared = server
    try:
        yield server
    finally:
        server.stop()
        _shared = None


@pytest.fixture
def zookeeper_server_factory(tmp_path: Path) -> Iterator[Any]:
    """``factory()`` starts a private standalone server; all are killed after the test."""
    servers: list[ZooKeeperServer] = []
    counter = itertools.count()

    def factory() -> ZooKeeperServer:
        server = _start_standalone(tmp_path / f"zk{next(counter)}")
        servers.append(server)
        return server

    yield factory
    for server in servers:
        server.stop()


class ZooKeeperBackend:
    """The ``Backend`` of tests/backends: one server, a fresh chroot for each test."""

    name = "zookeeper"
    cross_process = True

    def __init__(self, server: ZooKeeperServer, hosts: str | None = None) -> None:
        self.server = server
        self.hosts = hosts or server.hosts
        self.chroot = f"/ha-test-{uuid.uuid4().hex[:12]}"

    def url(self) -> str:
        return f"zk://{self.hosts}{self.chroot}"

    def driver(self, *, via: str | None = None, **options: Any) -> Any:
        """An unstarted driver on this test's chroot; ``via``: other hosts (a fault proxy)."""
        from ha.drivers.zookeeper import ZooKeeperDriver

        options.setdefault("session_timeout", 2.0)
        options.setdefault("connect_timeout", 5.0)
        url = f"zk://{via}{self.chroot}" if via else self.url()
        return ZooKeeperDriver.from_url(url, **options)


@pytest.fixture
def zookeeper_backend(zookeeper_server: ZooKeeperServer) -> ZooKeeperBackend:
    return ZooKeeperBackend(zookeeper_server)


class ZooKeeperEnsemble:
    """Three servers in one quorum; ``stop(i)`` / ``start(i)`` take member ``i`` down and up.

    ``proxied``: each server reaches every other one's quorum and election ports through links
    of a fault proxy of its own (its zoo.cfg names the links; its own line, which it binds, the
    real ports), so ``cut(i, j)`` / ``heal(i, j)`` freeze and unfreeze the links between
    members ``i`` and ``j`` (both ways) without touching their clients. ZooKeeper keeps one
    election connection per pair: when the lower id dials, the higher one dials back to the
    address the lower one announced (its real port), and that connection bypasses the proxy.
    The peer (data) link, by which a follower hears its leader, always goes through it.
    """

    def __init__(
        self, directory: Path, size: int = 3, *, proxied: bool = False, sync_limit: int = 10
    ) -> None:
        real = {member: (free_port(), free_port()) for member in range(1, size + 1)}
        self.proxy: Any = None
        # (from, to) -> the links from member ``from`` to member ``to``'s quorum and election
        self.links: dict[tuple[int, int], tuple[Any, Any]] = {}
        if proxied:
            from tests.support.faultproxy import FaultProxy

            self.proxy = FaultProxy()
            for a in real:
                for b in real:
                    if a != b:
                        quorum, election = real[b]
                        self.links[a, b] = (
                            self.proxy.link(("127.0.0.1", quorum)),
                            self.proxy.link(("127.0.0.1", election)),
                        )
        self.servers = []
        for member in real:
            peers = {
                other: real[other]
                if other == member or not proxied
                else (self.links[member, other][0].port, self.links[member, other][1].port)
                for other in real
            }
            self.servers.append(
                ZooKeeperServer(
                    directory / f"member{member}",
                    server_id=member,
                    peers=peers,
                    sync_limit=sync_limit,
                )
            )

    def _pair(self, i: int, j: int) -> list[Any]:
        a, b = i + 1, j + 1  # member ids
        return [*self.links[a, b], *self.links[b, a]]

    def cut(self, i: int, j: int) -> None:
        """Freeze every proxied link between members ``i`` and ``j`` (indexes), both ways."""
        for link in self._pair(i, j):
            link.pause()

    def heal(self, i: int, j: int) -> None:
        for link in self._pair(i, j):
            link.accept()  # undoes pause and refuse

    def leader(self) -> int:
        """The index of the member that leads now (raises if none says so)."""
        for index in range(len(self.servers)):
            if self.mode(index) == "leader":
                return index
        raise RuntimeError("no member of the ensemble is leading")

    @property
    def hosts(self) -> str:
        return ",".join(server.hosts for server in self.servers)

    def url(self, chroot: str = "") -> str:
        return f"zk://{self.hosts}{chroot}"

    def start_all(self, timeout: float = 60.0) -> None:
        for server in self.servers:
            server.start()
        for server in self.servers:
            server.wait_serving(timeout)

    def stop(self, index: int) -> None:
        self.servers[index].stop()

    def start(self, index: int, timeout: float = 60.0) -> None:
        self.servers[index].start()
        self.servers[index].wait_serving(timeout)

    def mode(self, index: int) -> str:
        """'leader', 'follower', or '' if the member is down or out of the quorum."""
        for line in four_letter(self.servers[index].port, "srvr").splitlines():
            if line.startswith("Mode:"):
                return line.split(":", 1)[1].strip()
        return ""

    def stop_all(self) -> None:
        for server in self.servers:
            server.stop()
        if self.proxy is not None:
            self.proxy.close()


@pytest.fixture(scope="module")
def zookeeper_ensemble_shared(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[ZooKeeperEnsemble]:
    reason = missing_reason()
    if reason:
        pytest.skip(f"ZooKeeper tests need a local ZooKeeper: {reason}")
    ensemble = ZooKeeperEnsemble(tmp_path_factory.mktemp("ensemble"))
    try:
        ensemble.start_all()
        yield ensemble
    finally:
        ensemble.stop_all()


@pytest.fixture
def zookeeper_ensemble(
    zookeeper_ensemble_shared: ZooKeeperEnsemble,
) -> Iterator[ZooKeeperEnsemble]:
    """The module's ensemble, with every member running again after the test."""
    ensemble = zookeeper_ensemble_shared
    yield ensemble
    for index, server in enumerate(ensemble.servers):
        if not server.running:
            ensemble.start(index)
    for server in ensemble.servers:
        server.wait_serving()


@pytest.fixture
def zookeeper_proxied_ensemble(tmp_path: Path) -> Iterator[ZooKeeperEnsemble]:
    """A private ensemble with proxied quorum links and syncLimit 5 s (50 ticks)."""
    reason = missing_reason()
    if reason:
        pytest.skip(f"ZooKeeper tests need a local ZooKeeper: {reason}")
    ensemble = ZooKeeperEnsemble(tmp_path / "ensemble", proxied=True, sync_limit=50)
    try:
        ensemble.start_all()
        deadline = time.monotonic() + 60
        while not any(ensemble.mode(i) == "leader" for i in range(3)):
            if time.monotonic() > deadline:
                raise RuntimeError("the proxied ensemble elected no leader within 60 s")
            time.sleep(0.1)
        yield ensemble
    finally:
        ensemble.stop_all()


class ZooKeeperNet:
    """A ``tests.support.harness.Net`` on one ZooKeeper server: each driver gets its own proxy link.

    crash: the link refuses (no goodbye reaches the server; the session times out);
    expire: ``expire_session``; cut_off/restore: the link pauses/resumes (a frozen network);
    disconnect/reconnect: the link refuses/accepts again (kazoo notices at once);
    transient/fatal: ``ha.testing.faults(driver).fail_next``.
    """

    name = "zookeeper"
    faults = frozenset(
        {"crash", "expire", "cut_off", "restore", "disconnect", "reconnect", "transient", "fatal"}
    )
    session_timeout = 1.0

    def __init__(self, server: ZooKeeperServer) -> None:
        from tests.support.faultproxy import FaultProxy

        self.server = server
        self.proxy = FaultProxy()
        self.chroot = f"/ha-net-{uuid.uuid4().hex[:12]}"
        self._links: dict[int, Any] = {}

    def driver(self, session_timeout: float | None = None) -> Any:
        from ha.drivers.zookeeper import ZooKeeperDriver

        link = self.proxy.link(("127.0.0.1", self.server.port))
        driver = ZooKeeperDriver.from_url(
            f"zk://{link.hosts}{self.chroot}",
            session_timeout=session_timeout or self.session_timeout,
            connect_timeout=5.0,
        )
        self._links[id(driver)] = link
        return driver

    async def crash(self, driver: Any) -> None:
        self._links[id(driver)].refuse()

    async def expire(self, driver: Any) -> None:
        if driver.session_id is not None:  # between two sessions there is nothing to expire
            await expire_session(driver, hosts=self.server.hosts)

    def fail_next(self, driver: Any, count: int, transient: bool) -> None:
        faults(driver).fail_next(count, transient=transient)

    async def apply(self, fault: str, driver: Any) -> None:
        link = self._links[id(driver)]
        actions = {
            "cut_off": link.pause,
            "restore": link.resume,
            "disconnect": link.refuse,
            "reconnect": link.accept,
        }
        if fault not in actions:
            raise ValueError(f"the zookeeper net has no fault {fault!r}")
        actions[fault]()

    async def heal(self, drivers: list[Any]) -> None:
        for driver in drivers:
            link = self._links.get(id(driver))
            if link is not None:
                link.accept()  # listens and forwards again: undoes pause and refuse

    def close(self) -> None:
        self.proxy.close()


async def expire_session(driver: Any, hosts: str | None = None) -> None:
    """Make ZooKeeper expire ``driver``'s current session now, as
    ``ha.testing.faults(driver).expire()`` does, but joining the session at ``hosts`` (the
    server's own address, when the driver talks to it through a fault proxy that may be cut).
    """
    await driver._faults().expire(hosts)
