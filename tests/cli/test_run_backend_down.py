"""`ha run` started while its backend is down (issue 26, item 7): a real etcd or ZooKeeper server
started after the command, a port that refuses connections, and one that accepts them and never
answers.

Before, `ha run` exited 1 once the driver's connect timeout ran out. Now it tries again with a
capped backoff and one log line per try, leads once the server is up, and stops at once on
SIGINT (exit 130, as any command; issue 30) or SIGTERM (exit 0) while it waits; a bad URL still
fails at once in one line.
"""

from __future__ import annotations

import re
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.backends import etcd, zookeeper
from tests.support.cli import Hosts, Silent, ha, ha_env, one_error_line, wait_until

LOOPS = ["asyncio", "trio"]
BACKENDS = ["etcd", pytest.param("zk", marks=pytest.mark.zookeeper)]
FAILED_TRY = re.compile(r"cannot reach the backend \(.*\): try (\d+), trying again in [\d.]+s")


def url(scheme: str, port: int, connect_timeout: float) -> str:
    query = f"session_timeout=2&connect_timeout={connect_timeout}"
    return f"{scheme}://127.0.0.1:{port}/late?{query}"


def failed_tries(hosts: Hosts, identity: str) -> list[int]:
    return [int(n) for n in FAILED_TRY.findall(hosts.log(identity))]


def wait_for_tries(hosts: Hosts, identity: str, count: int) -> None:
    """Until ``count`` failed tries are logged, or the command has exited."""
    proc = hosts.procs[identity]

    def tried() -> bool:
        return len(failed_tries(hosts, identity)) >= count or proc.poll() is not None

    wait_until(tried, f"{count} failed tries", within=60)


@pytest.fixture
def late_server(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[int, Callable[[], None]]]:
    """A server of the backend ``request.param`` not started yet: its port, and how to start it
    (killed and removed after the test)."""
    if request.param == "etcd":
        reason = etcd.missing_reason()
        if reason:
            pytest.skip(f"needs a local etcd: {reason}")
        server = etcd.EtcdServer()
        try:
            yield server.port, server.start
        finally:
            server.remove()
        return
    reason = zookeeper.missing_reason()
    if reason:
        pytest.skip(f"needs a local ZooKeeper: {reason}")
    zk = zookeeper.ZooKeeperServer(tmp_path / "zookeeper")

    def start() -> None:  # returns once it serves, as etcd's start does: `ha status` asks at once
        zk.start()
        zk.wait_serving()

    try:
        yield zk.port, start
    finally:
        zk.stop()


@pytest.mark.parametrize("loop", LOOPS)
@pytest.mark.parametrize("late_server", BACKENDS, indirect=True)
def test_ha_run_waits_for_a_backend_started_after_it(
    tmp_path: Path,
    late_server: tuple[int, Callable[[], None]],
    loop: str,
    request: pytest.FixtureRequest,
) -> None:
    port, start = late_server
    scheme = request.node.callspec.params["late_server"]
    with Hosts(tmp_path, url(scheme, port, 0.3), HA_ASYNC_BACKEND=loop) as hosts:
        proc = hosts.start("a")
        wait_for_tries(hosts, "a", 2)
        assert proc.poll() is None, hosts.log("a")  # it exited 1 at the connect timeout
        assert hosts.child("a") is None
        start()
        doc = hosts.settled()
        assert doc["active"] == "a"
        tries = failed_tries(hosts, "a")
        assert tries == list(range(1, len(tries) + 1))  # one line per try, counted
        assert f"reached the backend after {len(tries)} failed tries" in hosts.log("a")
        assert "Traceback" not in hosts.log("a")


@pytest.mark.parametrize("loop", LOOPS)
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["TERM", "INT"])
@pytest.mark.parametrize("when", ["during a try", "between tries"])
@pytest.mark.parametrize("scheme", ["etcd", "zk"])
def test_a_signal_while_waiting_for_the_backend_stops_at_once(
    tmp_path: Path, loop: str, signum: signal.Signals, when: str, scheme: str
) -> None:
    silent = Silent()
    try:
        if when == "during a try":  # the connect timeout is far off: the try is cut short
            target = url(scheme, silent.port, 120)
        else:  # nobody listens: each try fails at once
            target = url(scheme, zookeeper.free_port(), 0.2)
        with Hosts(tmp_path, target, HA_ASYNC_BACKEND=loop) as hosts:
            proc = hosts.start("a")
            if when == "during a try":
                silent.wait_for_a_client()
            else:
                wait_for_tries(hosts, "a", 1)
            proc.send_signal(signum)
            try:
                code = proc.wait(timeout=30)  # a hang guard: it stops at once
            except subprocess.TimeoutExpired:
                pytest.fail(f"still waiting after {signum.name}: {hosts.log('a')}")
            log = hosts.log("a")
            assert code == (130 if signum == signal.SIGINT else 0), log
            assert f"{signum.name} received while waiting for the backend: stopping" in log
            assert "Traceback" not in log and "error" not in log
            if when == "during a try":
                assert failed_tries(hosts, "a") == []
            assert hosts.child("a") is None
    finally:
        silent.close()


@pytest.mark.parametrize(
    ("bad", "said"),
    [
        ("etcd://127.0.0.1:x/late", "malformed etcd endpoint"),
        ("etcdx://127.0.0.1:2379/late", "unknown backend scheme 'etcdx'"),
        ("etcd://127.0.0.1:2379/late?session_timeout=abc", "session_timeout"),
    ],
)
def test_a_bad_url_still_fails_at_once_in_one_line(tmp_path: Path, bad: str, said: str) -> None:
    result = ha("--url", bad, "run", "/svc", "--id", "a", "--", "true", env=ha_env(tmp_path))
    line = one_error_line(result)
    assert said in line and result.returncode == 1
