"""Leader changes told to Kubernetes: an Event for each, and (``?pod=NAME``) the pod's role.

**Events.** As client-go's leader election records one (``LeaderElectionRecord`` changes go
to an ``EventRecorder``), each term this driver's electors begin or end is a core/v1 Event
about the election's Lease (``leaders.py``)::

    kubectl get events --field-selector reason=LeaderElection
    LAST SEEN   TYPE     REASON           OBJECT                              MESSAGE
    3s          Normal   LeaderElection   lease/myapp-ha-e-myapp-a087089ba1   myapp-5d9c7-x2x4k became leader (epoch 12)

named ``LEASE.<nanoseconds in hex>`` as client-go names them, with ``source.component`` and
``reportingComponent`` "ha" and ``reportingInstance`` the identity.

**The pod's role.** Given its pod's name, the driver labels that pod ``ha.io/role=active``
while one of its electors leads and ``ha.io/role=standby`` otherwise (from its start on, so a
container restarted under an "active" label loses it before it can be Ready again), with a
JSON merge patch of the pod's labels (Patroni labels its pods the same way). A Service that
selects ``ha.io/role: active`` sends traffic to the active alone (``deploy/kubernetes``).

**Information only**, like the Leases of ``leaders.py``: ``show_leader``/``hide_leader`` note
the change and wake this module's loop, which does the writing; nothing waits for it, a failed
write is logged once (again after a success) and the label is tried again. The label and the
events follow the elector's terms; a deposed active cut off from the API server cannot clear
its label, which is why the pod's readiness (``/member``) must say it is out: a Service sends
traffic only to Ready pods.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import anyio

from ...errors import HAError
from .api import failure
from .leaders import lease_name
from .session import micro_time
from .transport import Transport

__all__ = ("ROLE", "LeaderNotices")

log = logging.getLogger("ha.drivers.kubernetes")

ROLE = "ha.io/role"
COMPONENT = "ha"
REASON = "LeaderElection"  # client-go's
MAX_PENDING = 64  # Events waiting to be written: older ones are dropped past it (a long outage)


class LeaderNotices:
    """Events on leader changes, and the role label of this process's pod: a part of the
    driver, told of each change by it, beside the leader view (``leaders.py``)."""

    def __init__(self, transport: Transport, period: Callable[[], float]) -> None:
        self._transport = transport
        self._period = period  # the session timeout, as granted
        self._pod = transport.settings.options.pod
        self._leading: dict[str, str] = {}  # path -> who leads it from here
        self._events: list[dict[str, Any]] = []
        self._role_written: str | None = None
        self._notices_changed = anyio.Event()
        self._notices_idle = anyio.Event()  # set while nothing waits to be written
        self._notices_failing = False

    @property
    def role(self) -> str:
        return "active" if self._leading else "standby"

    # --- the driver's hooks (ha.drivers.base: show_leader, hide_leader) ---------------------

    def show_leader(self, path: str, identity: bytes, epoch: int) -> None:
        who = identity.decode(errors="backslashreplace")
        self._leading[path] = who
        self._note(path, who, f"{who} became leader (epoch {epoch})")

    def hide_leader(self, path: str, epoch: int) -> None:
        who = self._leading.pop(path, "?")
        self._note(path, who, f"{who} stopped leading (epoch {epoch})")

    def _note(self, path: str, who: str, message: str) -> None:
        self._events.append(self._event_record(path, who, message))
        del self._events[:-MAX_PENDING]
        if self._notices_idle.is_set():
            self._notices_idle = anyio.Event()
        self._notices_changed.set()

    # --- the loop ------------------------------------------------------------------------------

    @property
    def pending(self) -> bool:
        """Events or a label not written yet."""
        return bool(self._events) or bool(self._pod and self._role_written != self.role)

    async def quiesce(self) -> None:
        """Let the last notices go out (a stop's "stopped leading" and standby label) before
        the tasks are cancelled, for a second at most."""
        with anyio.move_on_after(1):
            while self.pending and not self._notices_failing:
                await self._notices_idle.wait()  # replaced by each new notice (``_note``)

    async def run(self) -> None:
        while True:
            self._notices_changed = anyio.Event()  # before the writes: a change meanwhile is seen
            try:
                if self._pod and self._role_written != self.role:
                    role = self.role
                    await self._label(self._pod, role)
                    self._role_written = role
                while self._events:
                    await self._post(self._events[0])
                    self._events.pop(0)
                self._notices_failing = False
            except Exception as exc:  # information only: the session goes on
                if not self._notices_failing:
                    log.warning(
                        "could not tell Kubernetes of a leader change (information only: the"
                        " election goes on; tried again every %g s): %s",
                        self._period() / 3,
                        exc,
                        exc_info=not isinstance(exc, HAError),
                    )
                self._notices_failing = True
            if self.pending:
                with anyio.move_on_after(self._period() / 3):  # failing: try again
                    await self._notices_changed.wait()
            else:
                self._notices_idle.set()
                await self._notices_changed.wait()

    async def _label(self, pod: str, role: str) -> None:
        url = f"/api/v1/namespaces/{self._transport.namespace}/pods/{pod}"
        patch = {"metadata": {"labels": {ROLE: role}}}
        status, reply = await self._transport.request(
            "PATCH", url, patch, own=True, content_type="application/merge-patch+json"
        )
        if status != 200:
            raise failure(status, reply, "PATCH", "pods", self._transport.where)

    async def _post(self, event: dict[str, Any]) -> None:
        url = f"/api/v1/namespaces/{self._transport.namespace}/events"
        status, reply = await self._transport.request("POST", url, event, own=True)
        if status == 409:  # our name again (a retry whose first answer was lost): it is there
            return
        if status != 201:
            raise failure(status, reply, "POST", "events", self._transport.where)

    def _event_record(self, path: str, who: str, message: str) -> dict[str, Any]:
        lease = lease_name(self._transport.settings.name, path)
        namespace = self._transport.namespace
        now = micro_time().split(".")[0] + "Z"  # firstTimestamp: a metav1.Time, whole seconds
        return {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{lease}.{time.time_ns():x}", "namespace": namespace},
            "involvedObject": {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "name": lease,
                "namespace": namespace,
            },
            "reason": REASON,
            "message": message[:1024],
            "type": "Normal",
            "source": {"component": COMPONENT},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
            "reportingComponent": COMPONENT,
            "reportingInstance": who[:128],
        }
