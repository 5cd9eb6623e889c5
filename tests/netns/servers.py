"""Servers on hosts: a ZooKeeper ensemble, an etcd cluster and the Kubernetes fake, each member
a process in a host of its own (``tests/netns/hosts.py``), listening on that host's address
with the well-known ports; peers and clients reach it over the bridge, with no proxy between.

``Daemon`` is one such process: ``start`` (and wait until it answers), ``kill`` (SIGKILL, a
crash; the data stays, so ``start`` brings it back on it), ``pause``/``resume``
(SIGSTOP/SIGCONT). The readiness probes run in the harness's own namespace, through the
bridge, as every judge does.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path

from tests.netns.hosts import Host

__all__ = ("Daemon", "etcd_cluster", "kube_api", "zookeeper_ensemble")

REPO = Path(__file__).resolve().parents[2]
ZK_CLIENT, ZK_QUORUM, ZK_ELECTION = 2181, 2888, 3888
ETCD_CLIENT, ETCD_PEER, ETCD_METRICS = 2379, 2380, 2381
KUBE_PORT = 6443


class Daemon:
    """A server process on a host."""

    def __init__(
        self,
        host: Host,
        argv: Sequence[str],
        log: Path,
        ready: Callable[[], bool],
        env: dict[str, str] | None = None,
    ) -> None:
        self.host, self.command, self.log, self.ready = host, list(argv), log, ready
        self.env = env
        self.process: subprocess.Popen[bytes] | None = None
        self.paused = False

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.running and self.process else None

    def start(self, timeout: float = 60.0, wait: bool = True) -> None:
        if self.running:
            return
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                self.host.argv(self.command),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env,
            )
        self.paused = False
        if wait:
            self.wait(timeout)

    def wait(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.running:
                tail = self.log.read_text(errors="replace").splitlines()[-15:]
                raise RuntimeError(
                    f"{self.command[0]} on {self.host.name} exited:\n" + "\n".join(tail)
                )
            if self.ready():
                return
            time.sleep(0.05)
        raise RuntimeError(f"{self.command[0]} on {self.host.name} not ready after {timeout} s")

    def kill(self) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGCONT)  # a stopped process dies only once continued
            os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=10)
        self.paused = False

    def pause(self) -> None:
        if self.process is not None and self.running:
            os.kill(self.process.pid, signal.SIGSTOP)
            self.paused = True

    def resume(self) -> None:
        if self.process is not None and self.running:
            os.kill(self.process.pid, signal.SIGCONT)
        self.paused = False


# --- ZooKeeper --------------------------------------------------------------------------------


def four_letter(address: str, command: str) -> str:
    from tests.support.backends.zookeeper import four_letter as ask

    return ask(ZK_CLIENT, command, timeout=0.5, host=address)


def zookeeper_ensemble(hosts: list[Host], directory: Path, sync_limit: int = 50) -> list[Daemon]:
    """One ZooKeeper member per host (ids 1..n). ``sync_limit`` ticks (100 ms): how long a
    follower cut off from its leader goes on serving its clients (stock ZooKeeper: 10 s)."""
    from tests.support.backends.zookeeper import JVM_OPTS, LOG_JAR, MAX_SESSION_MS, TICK_MS, ZK_JAR

    members = []
    for index, host in enumerate(hosts, 1):
        home = directory / f"zk{index}"
        data = home / "data"
        data.mkdir(parents=True, exist_ok=True)
        (data / "myid").write_text(f"{index}\n")
        lines = [
            f"tickTime={TICK_MS}",
            "initLimit=20",
            f"syncLimit={sync_limit}",
            f"dataDir={data}",
            f"clientPort={ZK_CLIENT}",
            f"clientPortAddress={host.address}",
            f"maxSessionTimeout={MAX_SESSION_MS}",
            "admin.enableServer=false",
            "4lw.commands.whitelist=ruok,srvr,mntr,cons",
            "maxClientCnxns=200",
            *(f"server.{i}={h.address}:{ZK_QUORUM}:{ZK_ELECTION}" for i, h in enumerate(hosts, 1)),
        ]
        (home / "zoo.cfg").write_text("\n".join(lines) + "\n")
        argv = ["java", *JVM_OPTS, "-cp", f"{ZK_JAR}:{LOG_JAR}"]
        argv += ["org.apache.zookeeper.server.quorum.QuorumPeerMain", str(home / "zoo.cfg")]

        def serving(address: str = host.address) -> bool:
            return "Mode:" in four_letter(address, "srvr")

        members.append(Daemon(host, argv, home / "server.log", serving))
    return members


def zookeeper_mode(member: Daemon) -> str:
    """leader, follower, or '' (down, paused, no quorum)."""
    if not member.running or member.paused:
        return ""
    for line in four_letter(member.host.address, "srvr").splitlines():
        if line.startswith("Mode:"):
            return line.split(":", 1)[1].strip()
    return ""


# --- etcd ---------------------------------------------------------------------------------------


def etcd_call(address: str, method: str, body: dict[str, object], timeout: float = 2.0) -> object:
    request = urllib.request.Request(
        f"http://{address}:{ETCD_CLIENT}/v3/{method}", data=json.dumps(body).encode()
    )
    with urllib.request.urlopen(request, timeout=timeout) as reply:
        return json.load(reply)


def etcd_cluster(
    hosts: list[Host], directory: Path, timers: tuple[int, int] = (50, 500)
) -> list[Daemon]:
    """One etcd member per host; timers (heartbeat, election, ms) as tests/support's cluster:
    10 ms heartbeats make a loaded 2-core machine call spurious elections."""
    from tests.support.backends.etcd import BINARY

    initial = ",".join(f"e{i}=http://{h.address}:{ETCD_PEER}" for i, h in enumerate(hosts, 1))
    members = []
    for index, host in enumerate(hosts, 1):
        home = directory / f"etcd{index}"
        home.mkdir(parents=True, exist_ok=True)
        client, peer = f"http://{host.address}:{ETCD_CLIENT}", f"http://{host.address}:{ETCD_PEER}"
        argv = [
            BINARY,
            *("--name", f"e{index}", "--data-dir", str(home / "data")),
            *("--listen-client-urls", client, "--advertise-client-urls", client),
            *("--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer),
            *("--initial-cluster", initial, "--initial-cluster-state", "new"),
            *("--listen-metrics-urls", f"http://{host.address}:{ETCD_METRICS}"),
            *("--heartbeat-interval", str(timers[0]), "--election-timeout", str(timers[1])),
            "--log-level=warn",
        ]

        def healthy(address: str = host.address) -> bool:
            try:
                url = f"http://{address}:{ETCD_METRICS}/health"
                with urllib.request.urlopen(url, timeout=0.5) as reply:
                    return bool(json.load(reply).get("health") == "true")
            except (OSError, ValueError):
                return False

        members.append(Daemon(host, argv, home / "etcd.log", healthy))
    return members


def etcd_leader(members: list[Daemon]) -> int | None:
    """The index of the member that leads, asked of members up (None: none answers, or no
    leader)."""
    ids: dict[str, int] = {}
    leader = None
    for index, member in enumerate(members):
        if not member.running or member.paused:
            continue
        with contextlib.suppress(OSError, ValueError):
            status = etcd_call(member.host.address, "maintenance/status", {}, timeout=1.0)
            assert isinstance(status, dict)
            ids[status["header"]["member_id"]] = index
            leader = leader or status.get("leader")
    return ids.get(leader) if leader else None


# --- the Kubernetes fake ----------------------------------------------------------------------


def kube_api(host: Host, directory: Path) -> Daemon:
    """The fake API server (tests/support/kubeapi) on a host, its state in a file so that a
    restart keeps objects and resourceVersions (as a control plane's restart does)."""
    directory.mkdir(parents=True, exist_ok=True)
    argv = [
        sys.executable,
        *("-m", "tests.support.kubeapi", "--host", host.address, "--port", str(KUBE_PORT)),
        *("--state-file", str(directory / "state.json")),
    ]

    def healthy() -> bool:
        try:
            url = f"http://{host.address}:{KUBE_PORT}/healthz"
            with urllib.request.urlopen(url, timeout=0.5) as reply:
                return bool(reply.status == 200)
        except OSError:
            return False

    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return Daemon(host, argv, directory / "kubeapi.log", healthy, env=env)
