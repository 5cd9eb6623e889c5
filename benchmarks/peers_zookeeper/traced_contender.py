"""``ha_contender.py`` (ZooKeeper) or ``peers_etcd/ha_etcd.py`` (etcd), run as they are, with the
bytes of a handover also dated at the socket, for ``benchmarks/handover_share.py``.

Besides the protocol's lines it prints, all on ``CLOCK_MONOTONIC`` (ns):

- ``QUIT <ns>``: when the ``RELEASING`` line had been written, just before ``elector.quit()``
  (the line's own write to the pipe is the harness's, not the client's);
- ``WRITTEN <ns>``: when the first request after ``RELEASING`` (the leave) was on the socket:
  kazoo's ``_submit`` returned (ZooKeeper), or a socket's ``send`` (etcd: the gateway's
  request; anyio's send then yields to the loop once more before it returns);
- ``READ <ns>``: when the process read bytes from the server, for every read in the 200 ms
  before ``LEADER`` (kazoo: a watch event, dated when its read began; etcd: any read of the
  gateway connections, dated when it returned), printed after ``LEADER`` so that printing costs
  the measured path nothing. The harness takes the first one after the old leader's
  ``WRITTEN``: the event that told this process. With ``HA_TRACE_WAITS=1`` (etcd, ``api``)
  each is followed by ``WAITED:<its ns> <ns>``: how long the reading thread was runnable
  without a CPU while that read was pending (the scheduler's part of its wake-up, and of any
  other work the thread did meanwhile; read from ``/proc`` before and after the read, about
  15 us each, outside the dated path).

``api`` runs ``peers_etcd/election_api.py`` (etcd's election API) traced the same way at its
sockets (``sendall`` and ``recv_into``, what ``http.client`` uses): ``WRITTEN`` is its resign on
the socket, ``READ`` the successor's campaign reply read (``etcd_server_part.py``).

The hooks wrap methods of kazoo and of ``ha.drivers.etcd.http``; they only take a clock reading.
With ``HA_TRACE_STEPS=1`` the steps inside ``ha`` are dated too (``traced_steps.py``) and
printed as ``STEP:<label> <ns>``: the old leader's after ``RELEASING``, at exit; the
successor's in the 200 ms before ``LEADER``, after it.

    traced_contender.py zk|etcd|api [--backend trio] --hosts ... --path ... --id ...
"""

from __future__ import annotations

import atexit
import os
import runpy
import socket
import sys
import threading
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
REPOSITORY = os.path.join(HERE, "..", "..")
sys.path.insert(0, os.environ.get("HA_ROOT") or REPOSITORY)

import protocol  # noqa: E402
import traced_steps  # noqa: E402
from protocol import say  # noqa: E402
from traced_steps import STEPS  # noqa: E402

RELEASED = threading.Event()
QUIT: list[int] = []
WRITTEN: list[int] = []
READS: list[int] = []  # appended from kazoo's thread or the loop; read after LEADER
# HA_TRACE_HOLD=SECONDS (etcd): the old leader sleeps, its loop blocked, that long after its
# leave is on the socket (``etcd_server_part.py --hold-old``)
HOLD = float(os.environ.get("HA_TRACE_HOLD") or 0)
# HA_TRACE_WAITS=1 (etcd, api): each read's run-queue wait too (``etcd_server_part.py``)
TRACE_WAITS = bool(os.environ.get("HA_TRACE_WAITS"))
WAITS: dict[int, int] = {}  # a read's stamp -> its thread's run-queue wait while in it


def run_queue_wait() -> int:
    """How long this thread has been runnable without a CPU, in all (ns): the second field of
    ``/proc/thread-self/schedstat``."""
    try:
        with open("/proc/thread-self/schedstat", "rb") as stats:
            return int(stats.read().split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def trace_kazoo() -> None:
    from kazoo.protocol.connection import ConnectionHandler

    submit, read_socket, read_event = (
        ConnectionHandler._submit,
        ConnectionHandler._read_socket,
        ConnectionHandler._read_watch_event,
    )
    began = threading.local()

    def traced_submit(self: Any, request: Any, timeout: float, xid: int | None = None) -> Any:
        result = submit(self, request, timeout, xid)
        if RELEASED.is_set() and not WRITTEN and xid is not None and xid > 0:
            WRITTEN.append(time.monotonic_ns())
        return result

    def traced_read_socket(self: Any, read_timeout: float) -> Any:
        began.at = time.monotonic_ns()
        return read_socket(self, read_timeout)

    def traced_read_event(self: Any, buffer: Any, offset: int) -> Any:
        READS.append(began.at)
        return read_event(self, buffer, offset)

    ConnectionHandler._submit = traced_submit
    ConnectionHandler._read_socket = traced_read_socket
    ConnectionHandler._read_watch_event = traced_read_event


def trace_gateway() -> None:
    # before the loop's library is imported: trio takes the socket's send as it loads
    send = socket.socket.send

    def traced_send(self: socket.socket, data: Any, *args: Any) -> int:
        sent = send(self, data, *args)
        if RELEASED.is_set() and not WRITTEN:
            WRITTEN.append(time.monotonic_ns())
            if HOLD:  # an experiment: keep this process off the CPU while the event travels
                time.sleep(HOLD)
        return sent

    socket.socket.send = traced_send  # type: ignore[method-assign]

    from ha.drivers.etcd.http import Connection

    fill = Connection._fill

    async def traced_fill(self: Any, *args: Any, **kwargs: Any) -> bool:
        waited = run_queue_wait() if TRACE_WAITS else 0
        result: bool = await fill(self, *args, **kwargs)
        READS.append(stamp := time.monotonic_ns())
        if TRACE_WAITS:
            WAITS[stamp] = run_queue_wait() - waited
        return result

    Connection._fill = traced_fill  # type: ignore[method-assign]


def trace_sockets() -> None:
    """The election API's contender: its requests are ``sendall``, its replies ``recv_into``."""
    sendall, recv_into = socket.socket.sendall, socket.socket.recv_into

    def traced_sendall(self: socket.socket, data: Any, *args: Any) -> None:
        sendall(self, data, *args)
        if RELEASED.is_set() and not WRITTEN:
            WRITTEN.append(time.monotonic_ns())

    def traced_recv_into(self: socket.socket, buffer: Any, *args: Any) -> int:
        waited = run_queue_wait() if TRACE_WAITS else 0
        got = recv_into(self, buffer, *args)
        READS.append(stamp := time.monotonic_ns())
        if TRACE_WAITS:
            WAITS[stamp] = run_queue_wait() - waited
        return got

    socket.socket.sendall = traced_sendall  # type: ignore[method-assign]
    socket.socket.recv_into = traced_recv_into  # type: ignore[method-assign]


def traced_say(word: str) -> None:
    """The protocol's ``say``, plus the trace: the leave is the first request after
    ``RELEASING``; the reads come after ``LEADER`` (printing must not delay it)."""
    if word == "RELEASING":
        RELEASED.set()
        STEPS.clear()
    say(word)
    if word == "RELEASING":
        QUIT.append(time.monotonic_ns())
    if word == "LEADER":
        now = time.monotonic_ns()
        for stamp in [r for r in READS if now - r < 200_000_000]:
            print(f"READ {stamp}", flush=True)
            if stamp in WAITS:
                print(f"WAITED:{stamp} {WAITS[stamp]}", flush=True)
        steps = [(label, s) for label, s in STEPS if now - s < 200_000_000]
        STEPS.clear()
        for label, stamp in steps:
            print(f"STEP:{label} {stamp}", flush=True)


def print_written() -> None:
    for stamp in QUIT:
        print(f"QUIT {stamp}", flush=True)
    for stamp in WRITTEN:
        print(f"WRITTEN {stamp}", flush=True)
    if RELEASED.is_set():
        for label, stamp in STEPS:
            print(f"STEP:{label} {stamp}", flush=True)


if __name__ == "__main__":
    driver = sys.argv.pop(1)
    if driver == "zk":
        trace_kazoo()
        contender = os.path.join(HERE, "ha_contender.py")
    elif driver == "api":
        trace_sockets()
        contender = os.path.join(HERE, "..", "peers_etcd", "election_api.py")
    else:
        trace_gateway()
        contender = os.path.join(HERE, "..", "peers_etcd", "ha_etcd.py")
    if os.environ.get("HA_TRACE_STEPS"):
        traced_steps.install(driver)
    protocol.say = traced_say  # the contender imports it by name when it runs
    atexit.register(print_written)
    sys.argv[0] = contender
    runpy.run_path(contender, run_name="__main__")
