"""What ``ha run`` tells systemd: readiness, status, stopping, and the watchdog's keep-alive.

The sd_notify(3) protocol, without libsystemd: a ``Type=notify`` service finds a datagram
socket in ``$NOTIFY_SOCKET`` (a path, or ``@name`` in the abstract namespace) and sends it
``KEY=VALUE`` lines (deploy/systemd/ha-run@.service; the README, "Under systemd").

- ``READY=1`` once the supervisor has joined the election (it stands by or leads), or has
  settled outside it for a reason of its own (a failing health check, a cooling period): it
  is up and doing its job, and ``STATUS=`` says which. Not while it waits for its first
  health check. ``systemctl start`` returns then, and units ordered after it start.
- ``STATUS=`` on every change of state, for ``systemctl status``; ``STOPPING=1`` when the
  supervisor begins to stop.
- ``WATCHDOG=1`` every third of ``$WATCHDOG_USEC`` (systemd's ``WatchdogSec=``), sent by a
  task of the supervisor's own task group, so only while its event loop runs: a supervisor
  that hangs or is stopped sends none, and systemd kills it (SIGABRT: faulthandler's
  traceback of the hang lands in the journal) and restarts it. The guard inside ``ha run``
  (``ha/_guard.py``) has stopped COMMAND on its own by then, before the session could expire.

The variables are taken out of the process's environment, so COMMAND, ``--fence`` and
``--health`` do not inherit them: they are the supervisor's, and systemd would refuse a
child's messages anyway (``NotifyAccess=main``). A message that cannot be sent (no listener,
a full queue) is dropped, never waited for: the next one says the same.
"""

from __future__ import annotations

import logging
import math
import os
import socket
from collections.abc import MutableMapping
from types import TracebackType

import anyio

from ..membership.rules import Standing

__all__ = ("ENVIRONMENT", "Notifier")

log = logging.getLogger("ha.supervisor")

ENVIRONMENT = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID")
JOINED = frozenset({"standby", "active", "fenced"})  # states only an elector that joined has
PINGS_PER_INTERVAL = 3  # a loop late by up to 2/3 of WatchdogSec is still in time
SHORTEST_PING = 0.01  # seconds: a WatchdogSec of a few microseconds must not spin the loop


class Notifier:
    """Sends sd_notify messages to ``address`` (None: nowhere, every call does nothing).

    ``watchdog``: systemd's watchdog interval in seconds (None: no watchdog).
    """

    def __init__(self, address: str | None = None, watchdog: float | None = None) -> None:
        self.address = address
        self.watchdog = watchdog
        self.ready = False
        self._stopping = False
        self._status = ""
        self._failed = False  # a send failed: said once in the log
        self._socket: socket.socket | None = None
        if address is not None:
            self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            self._socket.setblocking(False)

    @classmethod
    def from_environ(cls, environ: MutableMapping[str, str] | None = None) -> Notifier:
        """The notifier systemd's variables ask for, taking them out of ``environ``
        (``os.environ``); an inert one outside a ``Type=notify`` service."""
        env = os.environ if environ is None else environ
        found = {name: env.pop(name) for name in ENVIRONMENT if name in env}
        address = found.get("NOTIFY_SOCKET") or None
        if address is not None and address[0] not in "/@":
            log.warning("NOTIFY_SOCKET=%s: not a path or an abstract socket, ignored", address)
            address = None
        return cls(address, _watchdog(found.get("WATCHDOG_USEC"), found.get("WATCHDOG_PID")))

    def __enter__(self) -> Notifier:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None

    def send(self, *lines: str) -> bool:
        """One datagram of ``KEY=VALUE`` lines; False if it could not be sent."""
        if self._socket is None or self.address is None:
            return False
        target = "\0" + self.address[1:] if self.address.startswith("@") else self.address
        try:
            self._socket.sendto("\n".join(lines).encode(), target)
        except OSError as exc:
            if not self._failed:
                self._failed = True
                log.warning("cannot notify systemd at %s: %s", self.address, exc)
            return False
        return True

    def state(self, election: str, state: str, epoch: int | None, out: str | None) -> None:
        """The supervisor's state changed (``out``: why it stays out, when it does)."""
        if state == "out":
            status = f"out of {election}: {out or '?'}"
        elif state == "active" and epoch is not None:
            status = f"active in {election} (epoch {epoch})"
        else:
            status = f"{state} in {election}"
        if self._stopping:
            status = f"stopping: {status}"
        lines = [] if status == self._status else [f"STATUS={status}"]
        self._status = status
        settled = state in JOINED or (state == "out" and out != Standing.WAITING_FOR_HEALTH.value)
        if settled and not self.ready:
            self.ready = True
            lines.insert(0, "READY=1")
        if lines:
            self.send(*lines)

    def stopping(self) -> None:
        self._stopping = True
        self._status = "stopping"
        self.send("STOPPING=1", f"STATUS={self._status}")

    async def keep_alive(self) -> None:
        """Send ``WATCHDOG=1`` a few times per watchdog interval, for as long as it runs."""
        if self.watchdog is None or self._socket is None:
            return
        while True:
            self.send("WATCHDOG=1")
            await anyio.sleep(max(SHORTEST_PING, self.watchdog / PINGS_PER_INTERVAL))


def _watchdog(usec: str | None, pid: str | None) -> float | None:
    """The watchdog interval in seconds, if systemd asks this process for keep-alives."""
    if not usec:
        return None
    if pid and pid != str(os.getpid()):
        return None  # meant for another process (one that started us)
    try:
        seconds = int(usec) / 1e6
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        log.warning("WATCHDOG_USEC=%s: not a positive number of microseconds, ignored", usec)
        return None
    return seconds
