"""sd_notify without libsystemd (``ha/supervisor/systemd.py``): where messages go, which
variables are taken, when READY=1 is said, and that a busy or absent listener never blocks.

Real datagram sockets; tests/cli/test_run_systemd.py runs the whole of it through `ha run`.
"""

from __future__ import annotations

import logging
import os
import socket
import tempfile
from collections.abc import Iterator

import anyio
import pytest

from ha.membership.rules import Standing
from ha.supervisor.systemd import Notifier


class Listener:
    """systemd's end: a datagram socket at a path or in the abstract namespace."""

    def __init__(self, abstract: bool) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.dir = tempfile.TemporaryDirectory(prefix="ha-sd-")  # paths: 107 bytes at most
        if abstract:
            name = f"ha-test-{os.getpid()}-{os.path.basename(self.dir.name)}"
            self.sock.bind("\0" + name)
            self.address = "@" + name
        else:
            self.address = os.path.join(self.dir.name, "notify")
            self.sock.bind(self.address)
        self.sock.setblocking(False)

    def messages(self) -> list[str]:
        got = []
        while True:
            try:
                got.append(self.sock.recv(4096).decode())
            except BlockingIOError:
                return got

    def close(self) -> None:
        self.sock.close()
        self.dir.cleanup()


@pytest.fixture(params=["path", "abstract"])
def listener(request: pytest.FixtureRequest) -> Iterator[Listener]:
    found = Listener(abstract=request.param == "abstract")
    try:
        yield found
    finally:
        found.close()


def test_messages_reach_the_socket_systemd_names(listener: Listener) -> None:
    with Notifier.from_environ({"NOTIFY_SOCKET": listener.address}) as notifier:
        assert notifier.send("READY=1", "STATUS=up")
        assert notifier.send("WATCHDOG=1")
    assert listener.messages() == ["READY=1\nSTATUS=up", "WATCHDOG=1"]


def test_the_variables_are_taken_out_of_the_environment(listener: Listener) -> None:
    env = {
        "NOTIFY_SOCKET": listener.address,
        "WATCHDOG_USEC": "3000000",
        "WATCHDOG_PID": str(os.getpid()),
        "HOME": "/root",
    }
    with Notifier.from_environ(env) as notifier:
        assert notifier.watchdog == 3.0
    assert env == {"HOME": "/root"}  # COMMAND, --fence and --health do not inherit them


@pytest.mark.parametrize(
    ("usec", "pid", "watchdog"),
    [
        ("3000000", None, 3.0),
        ("250000", "self", 0.25),
        ("3000000", "1", None),  # meant for the process that started us
        (None, None, None),
    ],
)
def test_the_watchdog_is_ours_only_when_systemd_says_so(
    usec: str | None, pid: str | None, watchdog: float | None
) -> None:
    env = {"NOTIFY_SOCKET": "@unused"}
    if usec is not None:
        env["WATCHDOG_USEC"] = usec
    if pid is not None:
        env["WATCHDOG_PID"] = str(os.getpid()) if pid == "self" else pid
    with Notifier.from_environ(env) as notifier:
        assert notifier.watchdog == watchdog


@pytest.mark.parametrize("usec", ["0", "-5", "soon", "1e6"])
def test_a_bad_watchdog_interval_is_ignored_and_said(
    usec: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, "ha.supervisor"):
        with Notifier.from_environ({"NOTIFY_SOCKET": "@x", "WATCHDOG_USEC": usec}) as notifier:
            assert notifier.watchdog is None
    assert f"WATCHDOG_USEC={usec}: not a positive number" in caplog.text


@pytest.mark.parametrize("address", ["", "relative/notify", "vsock:2:1234"])
def test_a_socket_that_is_no_path_is_ignored(
    address: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, "ha.supervisor"):
        with Notifier.from_environ({"NOTIFY_SOCKET": address}) as notifier:
            assert notifier.address is None and not notifier.send("READY=1")
    assert ("not a path or an abstract socket" in caplog.text) == bool(address)


def test_outside_systemd_nothing_is_sent() -> None:
    with Notifier.from_environ({}) as notifier:
        assert notifier.address is None and notifier.watchdog is None
        assert not notifier.send("READY=1")
        notifier.state("/svc", "active", 3, None)  # does nothing, raises nothing


def test_a_gone_listener_is_said_once_and_never_raises(
    listener: Listener, caplog: pytest.LogCaptureFixture
) -> None:
    with Notifier(listener.address) as notifier:
        listener.close()
        with caplog.at_level(logging.WARNING, "ha.supervisor"):
            assert not notifier.send("WATCHDOG=1")
            assert not notifier.send("WATCHDOG=1")
    assert caplog.text.count("cannot notify systemd") == 1


def test_a_listener_that_does_not_read_never_blocks_the_sender(listener: Listener) -> None:
    # systemd busy: its queue fills, and a send is dropped instead of waiting (a pytest
    # timeout, not an assertion, would catch a send that blocks)
    with Notifier(listener.address) as notifier:
        sent = [notifier.send("WATCHDOG=1") for _ in range(100_000)]
    assert sent[0] and not all(sent)


def test_ready_once_joined_or_settled_out_and_status_on_each_change(listener: Listener) -> None:
    waiting, unhealthy = Standing.WAITING_FOR_HEALTH.value, Standing.UNHEALTHY.value
    with Notifier(listener.address) as notifier:
        notifier.state("/svc", "out", None, waiting)
        notifier.state("/svc", "out", None, waiting)  # the same status: nothing new to say
        assert listener.messages() == [f"STATUS=out of /svc: {waiting}"]
        notifier.state("/svc", "standby", None, None)
        notifier.state("/svc", "active", 7, None)
        notifier.state("/svc", "out", None, unhealthy)
        notifier.stopping()
        notifier.state("/svc", "neutral", None, None)
        assert listener.messages() == [
            "READY=1\nSTATUS=standby in /svc",
            "STATUS=active in /svc (epoch 7)",
            f"STATUS=out of /svc: {unhealthy}",
            "STOPPING=1\nSTATUS=stopping",
            "STATUS=stopping: neutral in /svc",
        ]


def test_a_failing_health_check_is_settled_out_hence_ready(listener: Listener) -> None:
    # up and doing its job, outside the election: systemctl start returns, STATUS says why
    with Notifier(listener.address) as notifier:
        notifier.state("/svc", "out", None, Standing.UNHEALTHY.value)
    assert listener.messages() == [f"READY=1\nSTATUS=out of /svc: {Standing.UNHEALTHY.value}"]


@pytest.mark.anyio
async def test_keep_alives_come_while_the_loop_runs(listener: Listener) -> None:
    with Notifier(listener.address, watchdog=0.03) as notifier:
        async with anyio.create_task_group() as tg:
            tg.start_soon(notifier.keep_alive)
            with anyio.fail_after(10):
                got: list[str] = []
                while len(got) < 5:
                    got += listener.messages()
                    await anyio.sleep(0.01)
            tg.cancel_scope.cancel()
    assert set(got) == {"WATCHDOG=1"}


@pytest.mark.anyio
async def test_without_a_watchdog_no_keep_alive_is_sent(listener: Listener) -> None:
    with Notifier(listener.address) as notifier:
        with anyio.fail_after(5):
            await notifier.keep_alive()  # returns at once
    assert listener.messages() == []
