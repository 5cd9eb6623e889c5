"""An elector's metrics: its state, epoch, transitions, takeovers, fences and last contact.

``contender = ElectorMetrics(registry).watch(elector, contender)`` before ``elector.run``:
what the elector already keeps (its public state, its lease, its refused fences and when it
tries again, its driver's last contact) is read at scrape time, and each transition is counted
by a listener (``Elector.add_listener``, called synchronously by the elector's reporting: no
task, no I/O).
Labels: ``election`` (the path) and ``identity``.

Takeover latency (``ha_elector_takeover_seconds``) is measured by the contender that takes
over, on its own clock: from the moment its driver told it that the previous leader's node or
breadcrumb was gone to its report of ACTIVE. ``kind="failover"``: on the way, the elector
fenced an old leader's breadcrumb (a crash or an expired session left it behind);
``kind="handover"``: it fenced nobody (a graceful exit deleted the breadcrumb with the node:
``quit``, ``ha failover``, SIGTERM of ``ha run``). What the elector did in between (listing
the queue, the fence command) is inside the figure; the detection delay (the session timeout
after a crash) is not, since only the backend knows when the old leader died. A successor that
learnt of the exit from a read of the queue rather than from an event (the leader left while
it was re-reading the queue) has no start to measure from and observes nothing; the
transition is still counted in ``ha_elector_transitions_total``.

The time the election had no active (``ha_election_leaderless_seconds``) is what an SLO
needs: the takeover plus, after a crash, the detection the takeover figure leaves out. The
successor cannot see when the old leader died, only when its node went; the backend ends a
dead process's session at most ``Driver.death_detection`` after its death (the session
timeout; sqlite sees a dead process within a poll), so that bound is added to a failover's
takeover: an upper bound, as an SLO wants it. Beside it, read at scrape time:
``ha_election_has_active`` (this elector is active or stands behind a leader: Patroni's
``cluster_unlocked``, inverted), ``ha_election_paused`` and
``ha_elector_active_since_timestamp_seconds`` (when the term began, while active).

A transition's cause is a label with its variable parts taken out ("behind host-a" becomes
"behind", "no answer in 3s" becomes "no answer in Ns"), so the label set stays small: no
leader's identity (a pod's name, new on every restart) in a label.

Fences are counted by the wrapper ``watch`` returns: the elector calls its
``fence_old_active`` for each old breadcrumb, which counts, then calls the contender's own
hook if it has one (without one the step succeeds at once, as the elector's would).
"""

from __future__ import annotations

import functools
import math
import re
from typing import Any

import anyio

from ..drivers.base import NodeEvent, NodeEventKind
from ..election.elector import Elector
from ..election.journal import Transition
from ..election.machine import State
from ..election.names import parse_entry
from ..election.nodes import ElectionNodes
from .backend import tap_node_events
from .registry import Registry

__all__ = ("ElectorMetrics", "cause_label")

_QUOTED = re.compile(r"""\s*(?:'[^']*'|"[^"]*"|\(.*|:.*)""")
_NUMBER = re.compile(r"\d+(?:\.\d+)?")


# causes that end with a name (the machine's "behind " + the leader's identity)
_NAMED = ("behind",)


def cause_label(cause: str) -> str:
    """A transition's cause without its variable parts (names, numbers, error details)."""
    text = _NUMBER.sub("N", _QUOTED.sub("", cause)).strip()
    for prefix in _NAMED:
        if text == prefix or text.startswith(prefix + " "):
            return prefix
    return text[:60] or "unknown"


def _now() -> float | None:
    try:
        return anyio.current_time()
    except RuntimeError:  # rendered outside the event loop (a test): no clock to compare with
        return None


class ElectorMetrics:
    """The ``ha_elector_*`` metrics of any number of electors in one registry."""

    def __init__(self, registry: Registry) -> None:
        labels = ("election", "identity")
        self.state = registry.gauge(
            "ha_elector_state",
            "1 for the elector's public state, 0 for the others",
            (*labels, "state"),
        )
        self.is_leader = registry.gauge(
            "ha_elector_is_leader", "1 while the elector is ACTIVE, else 0", labels
        )
        self.epoch = registry.gauge(
            "ha_elector_epoch", "The lease's epoch (fencing token) while ACTIVE", labels
        )
        self.transitions = registry.counter(
            "ha_elector_transitions_total",
            "Public state changes, by old and new state and cause",
            (*labels, "from", "to", "cause"),
        )
        self.takeover = registry.histogram(
            "ha_elector_takeover_seconds",
            "From seeing the previous leader go to being ACTIVE, as measured by the successor"
            " (kind: handover when it left gracefully, failover when it was fenced)",
            (*labels, "kind"),
        )
        self.contact_age = registry.gauge(
            "ha_elector_last_contact_age_seconds",
            "Seconds since the elector's driver last heard from the backend",
            labels,
        )
        self.connected = registry.gauge(
            "ha_elector_connected", "1 while the driver is in contact with the backend", labels
        )
        self.fence_attempts = registry.counter(
            "ha_elector_fence_attempts_total", "Calls of the contender's fence_old_active", labels
        )
        self.fence_failures = registry.counter(
            "ha_elector_fence_failures_total", "Fences that raised (takeover refused)", labels
        )
        self.fence_in_a_row = registry.gauge(
            "ha_elector_fence_refusals_in_a_row",
            "Refused fences of the same old active in a row (0 once one succeeds)",
            labels,
        )
        self.fence_next_try = registry.gauge(
            "ha_elector_fence_next_try_seconds",
            "While fences are refused: seconds until the next try (0: trying now)",
            labels,
        )
        self.has_active = registry.gauge(
            "ha_election_has_active",
            "1 while the election has an active as this elector sees it (itself, or the"
            " leader it stands behind), 0 while it sees none; absent while it is out",
            labels,
        )
        self.paused = registry.gauge(
            "ha_election_paused", "1 while the election is paused (ha pause), else 0", labels
        )
        self.active_since = registry.gauge(
            "ha_elector_active_since_timestamp_seconds",
            "While ACTIVE: when this elector's term began (unix seconds)",
            labels,
        )
        self.leaderless = registry.histogram(
            "ha_election_leaderless_seconds",
            "Time the election had no active, observed by the successor when it takes over:"
            " the takeover plus, after a crash (kind=failover), the backend's bound on"
            " seeing a process die (an upper bound)",
            (*labels, "kind"),
        )

    def watch(self, elector: Elector, contender: object) -> object:
        """Export ``elector``'s metrics from now on; return ``contender`` with its fences
        counted, to run the elector with (``elector.run(metrics.watch(elector, c))``). A later
        elector of the same election and identity (``ha run`` makes one per turn) takes the
        place of this one."""
        labels = {
            "election": elector.path,
            "identity": elector.identity.decode(errors="replace"),
        }
        for state in State:
            self.state.set_function(
                functools.partial(_is, elector, state), **labels, state=state.value
            )
        self.is_leader.set_function(lambda: float(elector.state is State.ACTIVE), **labels)
        self.epoch.set_function(lambda: _epoch(elector), **labels)
        driver = elector.driver
        self.contact_age.set_function(lambda: _age(driver.last_contact), **labels)
        self.connected.set_function(lambda: float(driver.connected), **labels)
        self.fence_in_a_row.set_function(lambda: _refusals(elector), **labels)
        self.fence_next_try.set_function(lambda: _next_fence(elector), **labels)
        self.has_active.set_function(lambda: _has_active(elector), **labels)
        self.paused.set_function(lambda: _paused(elector), **labels)
        self.active_since.set_function(lambda: elector.statistics().active_since, **labels)
        self.fence_attempts.labels(**labels)  # shown as 0 before the first
        self.fence_failures.labels(**labels)
        takeovers = _Takeovers(ElectionNodes(elector.path), self, labels, driver)
        tap_node_events(driver, (elector.path, elector.identity), takeovers.node_event)
        elector.add_listener(takeovers.transition)
        return _Measured(contender, takeovers)


def _is(elector: Elector, state: State) -> float:
    return float(elector.state is state)


def _epoch(elector: Elector) -> float | None:
    lease = elector.lease
    return None if lease is None else float(lease.epoch)


def _age(last_contact: float) -> float | None:
    now = _now()
    if now is None or not math.isfinite(last_contact):
        return None
    return max(0.0, now - last_contact)


def _has_active(elector: Elector) -> float | None:
    stats = elector.statistics()
    if stats.state is State.NEUTRAL:
        return None  # out of the election: it cannot tell
    return float(stats.holder is not None)


def _paused(elector: Elector) -> float | None:
    paused = elector.statistics().paused
    return None if paused is None else float(paused)


def _refusals(elector: Elector) -> float:
    fencing = elector.statistics().fencing
    return 0.0 if fencing is None else float(fencing.failures)


def _next_fence(elector: Elector) -> float | None:
    fencing = elector.statistics().fencing
    if fencing is None:
        return None  # no sample: nothing refused
    return fencing.next_try_in or 0.0


class _Takeovers:
    """Remembers when the leader's node or breadcrumb went; observes the latency on ACTIVE."""

    __slots__ = ("nodes", "metrics", "labels", "driver", "gone", "fenced")

    def __init__(
        self, nodes: ElectionNodes, metrics: ElectorMetrics, labels: dict[str, str], driver: Any
    ):
        self.nodes = nodes
        self.metrics = metrics
        self.labels = labels
        self.driver = driver  # its death_detection: what a crash adds before anyone can see it
        # (loop time, ticket) of the latest exit seen since the last transition
        self.gone: tuple[float, str] | None = None
        self.fenced = False  # a fence was called since: the takeover is a failover

    def node_event(self, event: NodeEvent) -> None:
        if event.kind is not NodeEventKind.DELETED:
            return
        parent, _, name = event.path.rpartition("/")
        if parent == self.nodes.crumbs:
            ticket = name
        elif parent == self.nodes.queue:
            entry = parse_entry(name)
            if entry is None:
                return
            ticket = entry.ticket
        else:
            return
        now = _now()
        if now is not None and (self.gone is None or self.gone[1] != ticket):
            # the latest exit is the one that let us lead, dated by its first node to go
            self.gone = (now, ticket)

    def transition(self, t: Transition) -> None:
        labels = self.labels
        self.metrics.transitions.labels(
            **labels, **{"from": t.old.value, "to": t.new.value}, cause=cause_label(t.cause)
        ).inc()
        gone, fenced, self.gone, self.fenced = self.gone, self.fenced, None, False
        if gone is not None and t.old is State.STANDBY and t.new is State.ACTIVE:
            kind = "failover" if fenced else "handover"
            took = max(0.0, t.monotonic - gone[0])
            self.metrics.takeover.labels(**labels, kind=kind).observe(took)
            detection = float(self.driver.death_detection) if fenced else 0.0
            self.metrics.leaderless.labels(**labels, kind=kind).observe(took + detection)


class _Measured:
    """A contender whose fence calls are counted; everything else is passed through.

    It always has ``fence_old_active``: the elector takes that step whether or not the
    contender has the hook (without one the epoch alone fences), so it is counted either way.
    """

    def __init__(self, contender: object, takeovers: _Takeovers):
        self._contender = contender
        self._takeovers = takeovers

    def __getattr__(self, name: str) -> Any:
        return getattr(self._contender, name)

    async def fence_old_active(self, breadcrumb: bytes) -> bool:
        """Counts the election's fencing steps (a crashed leader's breadcrumb), whether or
        not the contender had a fence to run; says which, as the hook did (contender.py)."""
        takeovers = self._takeovers
        metrics, labels = takeovers.metrics, takeovers.labels
        takeovers.fenced = True
        metrics.fence_attempts.labels(**labels).inc()
        hook = getattr(self._contender, "fence_old_active", None)
        if hook is None:
            return False
        try:
            ran = await hook(breadcrumb)
        except BaseException:  # raised, or cancelled by the fence timeout: refused
            metrics.fence_failures.labels(**labels).inc()
            raise
        return ran is not False
