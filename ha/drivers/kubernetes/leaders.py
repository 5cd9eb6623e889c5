"""Who leads each election, where Kubernetes users look: one Lease per election, for kubectl.

``kubectl get lease`` lists, for every election of the root, the active's identity, its epoch
and how fresh it is; ``kubectl describe lease`` and the tools that read client-go's older
leader annotation (Flink's dashboards among them) find the same record there::

    Lease NAME-ha-e-READABLE-HASH   labels: app.kubernetes.io/managed-by=ha, ha.io/leader-of=NAME
      annotations:
        ha.io/election                           the election's path, as given
        control-plane.alpha.kubernetes.io/leader {"holderIdentity", "leaseDurationSeconds",
                                                  "acquireTime", "renewTime", "leaderTransitions"}
      spec:
        holderIdentity        the active's identity (empty once it stopped, if nobody followed)
        leaseTransitions      its epoch: the fencing token (Stat.created of its queue node)
        leaseDurationSeconds  the session timeout
        acquireTime           when it became active
        renewTime             written every third of the duration while it is active

The name: ``NAME-ha-e-``, then the path lowercased with every run of other characters than
``a-z0-9`` as one ``-`` (at most 40 of them: something a reader recognises), then the first 10
hex digits of the SHA-256 of the exact path, so ``/a-b``, ``/a/b`` and ``/A/b`` get three
Leases (``lease_name``). A Lease of that name whose ``ha.io/election`` names another path (a
hash collision, or an object not ours) is left alone and the conflict logged.

**Information only.** Safety stays with the queue protocol (the ConfigMap tree and the session
Leases); nothing in ``ha`` reads these Leases. The layer: the elector's leadership scope calls
``Driver.show_leader`` when its term starts and ``hide_leader`` when it ends (no-ops on other
drivers). Both are plain calls that note the wish and wake this driver's background loop,
which does the writing: becoming active, fencing and stopping never wait for a request of
this module, and a failed write is logged once (again after a success), never raised. The
driver does not recognise the queue's nodes in its tree instead: that would copy the
election's layout (``ha/election/nodes.py``) into a driver, and the queue's first node is the
one *about* to lead (it fences first), not the active.

**A stale ex-leader never overwrites a newer holder.** Every write carries the resourceVersion
read or last written (409 if anyone wrote since) and the Lease's uid (409 if the Lease was
deleted meanwhile: a PUT without it would create the Lease anew, as Leases allow create on
update), and a Lease is taken over only if its
``leaseTransitions`` is below our epoch (epochs strictly increase from one active to the
next): a deposed active that still believes it leads re-reads, finds a higher epoch, and
stops writing. A release (the term's end) clears the holder with the version of our own last
write, so it never erases a successor's.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio

from ...errors import HAError
from .api import failure
from .session import micro_time
from .transport import Transport
from .tree import MANAGED

__all__ = ("ANNOTATION", "ELECTION", "LeaderLeases", "lease_name", "overwritable")

log = logging.getLogger("ha.drivers.kubernetes")

ANNOTATION = "control-plane.alpha.kubernetes.io/leader"  # client-go's older record (Flink)
ELECTION = "ha.io/election"
LEADER_OF = "ha.io/leader-of"
READABLE = 40
ATTEMPTS = 3  # writes of one renewal while others write the Lease (the next period retries)


def lease_name(root: str, path: str) -> str:
    """The name of the Lease that shows the leader of the election at ``path``."""
    readable = re.sub(r"[^a-z0-9]+", "-", path.lower()).strip("-")[:READABLE].strip("-")
    digest = hashlib.sha256(path.encode()).hexdigest()[:10]
    return f"{root}-ha-e-{readable}-{digest}" if readable else f"{root}-ha-e-{digest}"


def overwritable(lease: dict[str, Any], path: str, identity: str, epoch: int) -> str | None:
    """None if the active of ``epoch`` may write over ``lease``; else why it may not."""
    metadata = lease.get("metadata") or {}
    owner = (metadata.get("annotations") or {}).get(ELECTION)
    if owner != path:
        return f"it shows the election {owner!r}, not {path!r}"
    spec = lease.get("spec") or {}
    shown, holder = spec.get("leaseTransitions"), spec.get("holderIdentity")
    if isinstance(shown, int) and (
        shown > epoch or shown == epoch and holder not in (identity, None, "")
    ):
        return f"it shows a newer leader: {holder!r} with epoch {shown}"
    return None


@dataclass(slots=True)
class _Term:
    """One active term, as this driver shows it."""

    identity: str
    epoch: int
    acquired: str  # MicroTime: when it became active
    active: bool = True  # False: ended, the Lease to release
    version: str = ""  # the Lease's resourceVersion as we last read or wrote it
    uid: str = ""  # and its uid
    failing: bool = False  # a failure was logged: quiet until a write succeeds


class LeaderLeases:
    """The elections this driver's electors lead, kept visible as Leases (written every
    third of ``period()``, the session timeout)."""

    def __init__(self, transport: Transport, period: Callable[[], float]) -> None:
        self._transport = transport
        self._period = period
        self.terms: dict[str, _Term] = {}
        self._terms_changed = anyio.Event()
        self._terms_writing = False
        self._terms_idle = anyio.Event()

    # --- the hooks of ha.drivers.base: note the wish, never wait ------------------------------

    def show_leader(self, path: str, identity: bytes, epoch: int) -> None:
        who = identity.decode(errors="backslashreplace")
        self.terms[path] = _Term(who, epoch, micro_time())
        self._terms_changed.set()

    def hide_leader(self, path: str, epoch: int) -> None:
        term = self.terms.get(path)
        if term is not None and term.epoch == epoch:
            term.active = False
            self._terms_changed.set()

    # --- the loop ------------------------------------------------------------------------------

    async def quiesce(self) -> None:
        """Let a write under way (a release, most often: the elector stopped first) end
        before the tasks are cancelled, for a second at most."""
        if self._terms_writing:
            with anyio.move_on_after(1):
                await self._terms_idle.wait()

    async def run(self) -> None:
        while True:
            with anyio.move_on_after(self._period() / 3):
                await self._terms_changed.wait()
            self._terms_changed = anyio.Event()
            if not self.terms:
                continue
            self._terms_writing, self._terms_idle = True, anyio.Event()
            try:
                for path, term in list(self.terms.items()):
                    await self._write_term(path, term)
            finally:
                self._terms_writing = False
                self._terms_idle.set()

    async def _write_term(self, path: str, term: _Term) -> None:
        name = lease_name(self._transport.settings.name, path)
        try:
            write = self._hold if term.active else self._release
            done = await write(path, name, term)
        except Exception as exc:  # whatever it is, the session beside this loop goes on
            if not term.failing:
                log.warning(
                    "could not show the leader of %s in the Lease %s (information only: the"
                    " election goes on; tried again every %g s): %s",
                    path,
                    name,
                    self._period() / 3,
                    exc,
                    exc_info=not isinstance(exc, HAError),  # a bug: its traceback, once
                )
            term.failing = True
            return
        term.failing = False
        if done and self.terms.get(path) is term:
            del self.terms[path]

    async def _hold(self, path: str, name: str, term: _Term) -> bool:
        """Write (or renew) the Lease for an active term; True when there is nothing more to
        write for it (a newer leader is shown, or the Lease is not ours)."""
        url = f"{self._transport.leases_url}/{name}"
        for _ in range(ATTEMPTS):
            if not term.version:
                status, current = await self._transport.request("GET", url, own=True)
                if status == 404:
                    body = self._lease(path, name, term)
                    status, reply = await self._transport.request(
                        "POST", self._transport.leases_url, body, own=True
                    )
                    if status == 201:
                        term.version, term.uid = _version(reply), _uid(reply)
                        return False
                    if status == 409:  # someone made it first: read it
                        continue
                    raise failure(status, reply, "POST", "leases", self._transport.where)
                if status != 200:
                    raise failure(status, current, "GET", "leases", self._transport.where)
                why = overwritable(current, path, term.identity, term.epoch)
                if why is not None:
                    log.info("not showing %s as the leader of %s: %s", term.identity, path, why)
                    return True
                term.version, term.uid = _version(current), _uid(current)
            status, reply = await self._transport.request(
                "PUT", url, self._lease(path, name, term), own=True
            )
            if status == 200:
                term.version = _version(reply)
                return False
            if status not in (404, 409):
                raise failure(status, reply, "PUT", "leases", self._transport.where)
            term.version = term.uid = ""  # written or deleted by someone else: read it again
        return False

    async def _release(self, path: str, name: str, term: _Term) -> bool:
        """Clear the holder of a term that ended, unless someone wrote since our last write."""
        if not term.version:
            return True
        body = self._lease(path, name, term)
        status, reply = await self._transport.request(
            "PUT", f"{self._transport.leases_url}/{name}", body, own=True
        )
        if status not in (200, 404, 409):
            raise failure(status, reply, "PUT", "leases", self._transport.where)
        return True

    def _lease(self, path: str, name: str, term: _Term) -> dict[str, Any]:
        """The Lease showing ``term`` (ended: released as client-go releases one, with no
        holder and a one-second duration, the epoch kept)."""
        renewed = micro_time()
        holder = term.identity if term.active else ""
        settings = self._transport.settings
        duration = settings.lease_seconds if term.active else 1
        record = {
            "holderIdentity": holder,
            "leaseDurationSeconds": duration,
            "acquireTime": _seconds(term.acquired),
            "renewTime": _seconds(renewed),
            "leaderTransitions": term.epoch,
        }
        metadata: dict[str, Any] = {
            "name": name,
            "namespace": self._transport.namespace,
            "labels": {**MANAGED, LEADER_OF: settings.name},
            "annotations": {ELECTION: path, ANNOTATION: json.dumps(record, separators=(",", ":"))},
        }
        if term.version:
            metadata["resourceVersion"] = term.version
            metadata["uid"] = term.uid
        spec: dict[str, Any] = {
            "leaseDurationSeconds": duration,
            "acquireTime": term.acquired,
            "renewTime": renewed,
            "leaseTransitions": term.epoch,
        }
        if holder:
            spec["holderIdentity"] = holder
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": metadata,
            "spec": spec,
        }


def _version(body: dict[str, Any]) -> str:
    return str((body.get("metadata") or {}).get("resourceVersion") or "")


def _uid(body: dict[str, Any]) -> str:
    return str((body.get("metadata") or {}).get("uid") or "")


def _seconds(micro: str) -> str:
    """A MicroTime as a metav1.Time (RFC 3339 in whole seconds): the annotation's format."""
    return micro.split(".")[0] + "Z"
