"""The elector's state machine: pure, no I/O, no clock, no anyio (the h11 model).

``Machine.handle(input) -> list[Effect]``: inputs are facts that happened (past tense), effects
are commands for the runner (``elector.py``), which executes them in order and feeds their
outcomes back as inputs; both are defined in ``events.py``, the nodes' names in ``names.py``.

Election protocol 2: a queue of ephemeral sequential nodes (ZooKeeper's election recipe, as
in Curator's ``LeaderLatch``), with a breadcrumb per node for fencing (Hadoop's
``ActiveStandbyElector``) and the node's creation order as the fencing token (etcd's
``create_revision``, Kafka's controller epoch). Rules, each naming the mechanism it follows:

P1  Every input that names a session other than the current one is stale and dropped
    (Hadoop's ``isStaleClient``): a late answer or watch of a dead session never moves us.
P2  Joining is ONE transaction: our ephemeral sequential node ``n/TICKET_SEQ`` and its
    persistent breadcrumb ``b/TICKET``, under a ticket fresh for every join. A join whose
    reply was lost is looked for by its ticket before anything else (Curator's protected
    create): never two nodes of ours in the queue. A look that finds nothing does not end it:
    the backend may still apply the join after it (etcd commits a proposal that a follower
    forwarded once the link to the leader is back, whatever its client did meanwhile), as long
    as no other join came first (on etcd a join pins the queue's sequence counter, on
    Kubernetes the whole tree's version). So the ticket is kept (``landing``) until the
    listing that queues our next join, which shows the old node if it ever landed; that node
    is then left too. Forgotten, it stood in the queue in our own live session, ahead of our
    real node, and once first it blocked the election for good. A quit or a fatal error owes
    each such ticket a Leave instead (looked for by ticket, by the release after a quit too);
    a join that lands only after that last look is not chased (no join of ours follows it).
P3  The token is our node's creation order, fixed when we join: it grows from one leader to the
    next and is committed before that leader can act, so taking over writes nothing. A lease's
    fenced writes check that our node lives; it is never created again (the ticket is new),
    so a deposed leader's writes fail once its node is gone.
P4  Lead = no lower node. Behind others, watch only the node just below ours (no herd), and
    for the leader's node its breadcrumb too: STANDBY. A new leader writes its node once
    (Announce): the contender just behind it, which watched it as one among others, lists the
    queue again and watches it as the leader's, so that its exit costs no listing then. Not
    when the listing that made it lead showed nobody behind it: whoever joins later lists
    after that, finds it first and watches it as the leader's already.
P5  The node below ours deleted: if it was the only one below (the leader), we are first now,
    for no lower node can ever appear; otherwise list the queue again. When a lower node still
    lives, the deleted one never led: its breadcrumb is dropped unfenced.
P6  Graceful handover: the leader resigns by deleting its breadcrumb and its node in one
    transaction. A breadcrumb never goes while its node lives (a leave that drops it is one
    transaction too; others delete only the breadcrumbs of nodes gone), so a successor that
    sees the leader's breadcrumb go, with no stray breadcrumb, knows that the leader is gone
    and nobody needs fencing: ACTIVE at once, no request, not waiting for the node's event.
P7  Crash: the leader's node gone and its breadcrumb left: fence it (read while watching),
    then ACTIVE. With stray breadcrumbs (leaders that crashed in a row), or with what we knew
    lost (first in the queue after a listing, a reconnect), read every breadcrumb older than
    our node whose node is gone and fence each, oldest first (a listing of the queue that
    shows us first, beside a listing of the breadcrumbs all owned by its nodes, shows that
    there are none) (Hadoop's ``fenceOldActive``;
    one naming our own identity is ours from before). Once active, they are deleted, best
    effort: a later leader fencing one again is safe.
P8  Any failure on the way to ACTIVE leaves the queue (node, and breadcrumb if this ticket
    never acted: once it has, only a resign (P13) deletes it, whatever happens after)
    and backs off (exponential, capped, jittered by the runner); consecutive failures past
    ``max_retries`` are fatal (Hadoop's ``NUM_RETRIES``). Progress resets the count, except for
    failing ``become_active``: winning again is no progress for it, only a term that ends
    otherwise, or whose work ran ``lasting_term`` (60 s) before failing, resets it; it stays
    fatal, for it is this contender's own work failing (each try took the lead and started
    it), which whoever runs the process should hear of while the others lead. A term that
    lasted is no crash loop: a stream that fails once a week leads again every time, for
    months (Kubernetes' CrashLoopBackOff and Flink's exponential-delay restarts forget
    failures after a while of running too; ``ha run`` counts its restarts so). A refused fence is never fatal: until a fence works the old active
    may still act and nobody may lead, and giving up would leave the service headless for as
    long as the fencing device is down (ZKFC tries again for ever). It waits a backoff of its
    own (``WaitBackoff(fencing=True)``: the runner's fence backoff, capped for a STONITH
    device), whose attempt is the count of refusals of that breadcrumb in a row: at most one
    fence call per backoff, for a breadcrumb fenced once is not fenced again while another
    is refused (its ticket never leads again, P3). Another breadcrumb refused (a new incident)
    counts afresh; a fence of it that works, or every fence done, resets the count.
P9  Losing authority while ACTIVE (session expired, our node deleted, a fenced write refused)
    -> FENCED: the leadership scope is stopped first, our node is deleted if it lives, our
    breadcrumb stays for the next leader to fence; back off, then join again.
P10 Disconnected: by default an ACTIVE stops at once and goes NEUTRAL (Hadoop's
    ``enterNeutralMode``); with ``hold_on_disconnect`` it keeps leading until the runner's local
    deadline (shorter than the session timeout, client-go's renew deadline) and, when contact
    comes back within the session, lists the queue and carries on if it is still first.
P11 Reconnected in the same session: list the queue before anything else; what the watches
    said before is forgotten (a graceful exit is then confirmed by reading the breadcrumbs).
P12 Session expired: our node is gone; wait for the next session and join again. A request
    sent in the old session may still have run in the new one (a client that queues requests
    across sessions, as kazoo does): the new session first leaves every ticket of the old one
    (a no-op when its node is gone), or a node of ours nobody watches would lead the queue.
P13 ``quit(need_fence=False)`` stops the work, then resigns (P6) a ticket that ever acted,
    leading or not (its term stopped by a lost contact, its node still ours): at once, or by
    the runner once contact is back, a failed resign sent again as one, never as a leave that
    keeps the breadcrumb (nobody left to fence); if its node is gone by then, the breadcrumb
    stays. With ``need_fence`` only the node goes (the next leader fences us); a ticket that
    never acted leaves with both.
P14 A report of the public state is an effect placed after the stop of the leadership scope:
    nobody is told "not active" while the old scope may still run.
P15 Taking over (reading breadcrumbs, fencing) shows the state it began in: a standby whose
    leader went is told nothing until it is active (Hadoop's elector calls neither
    ``enterNeutralMode`` nor ``becomeStandby`` on the way); a failure on the way is then the
    change it reports (a backoff: NEUTRAL).
P16 Paused (Patroni's maintenance mode, ``ha pause``): the pause node ``PATH/pause`` is read in
    the same round trip as every listing, watch and breadcrumb read, and watched. While it is
    there (or a change of it came after our last read: not known to be gone), a contender first
    in the queue neither fences nor acts: PAUSED, holding its place, told nothing (P15). Its
    deletion makes it read the breadcrumbs again (P7), then fence and act as usual. The active
    is unaffected: it leads while it holds its node, so pausing never makes a second active;
    an active lost during a pause leaves the election without one until it is resumed.
P17 No term on stale contact (client-go's renew deadline, applied to starting as well as to
    keeping the lead): a win can come from events that a stalled process had buffered (a
    breadcrumb deleted while it was frozen, its session since expired), so the runner starts
    a term only while the local deadline, counted from the last contact, has not passed; it
    waits for contact while the session may live, else answers StartActive with
    DeadlineExpired and drops the rest of that win's effects (its report, its writes). Every
    way to ACTIVE passes there (first in the queue, the graceful fast path, after fencing,
    after a reconnect, again after a deadline); after DeadlineExpired the machine lists the
    queue again and acts on nothing but that answer.

The phases, the public states, the table of which phases act on each input and the moves
each input may make are in ``phases.py`` (with the theory of operation);
``python -m ha.election.diagram`` draws them.
"""

from __future__ import annotations

from collections.abc import Callable

from . import events as ev
from .names import decode_breadcrumb, lower_lives, parse_entry, ticket_for
from .phases import HANDLED, HELD, LEADING, LEGAL, MOVES, PUBLIC, WAITING, Phase, State
from .timing import LASTING_TERM

__all__ = (
    "HANDLED",
    "HELD",
    "LEADING",
    "LEGAL",
    "MOVES",
    "PUBLIC",
    "WAITING",
    "Machine",
    "Phase",
    "State",
)


# --- the machine -------------------------------------------------------------------------------


class Machine:
    """One contender's view of one election. Feed inputs to ``handle``; do what it returns.

    ``nonce()`` gives a fresh string for each join's ticket (random in the runner, counted in
    tests): the machine itself stays free of randomness.
    """

    __slots__ = (
        "identity", "max_retries", "lasting_term", "hold_on_disconnect", "nonce", "phase",
        "session",
        "connected", "reported", "failures", "active_failures", "fence_failures",
        "fence_target", "fenced", "backoff_token", "holder", "epoch", "ticket", "node",
        "token", "below", "crumb", "crumb_gone", "strays", "departed", "to_fence", "to_clear",
        "acted", "unleft", "landing", "paused", "pause_changes", "pause_asked",
    )  # fmt: skip

    def __init__(
        self,
        identity: bytes,
        *,
        max_retries: int = 5,
        lasting_term: float = LASTING_TERM,
        hold_on_disconnect: bool = False,
        nonce: Callable[[], str] | None = None,
    ) -> None:
        self.identity = identity
        self.max_retries = max_retries
        self.lasting_term = lasting_term
        self.hold_on_disconnect = hold_on_disconnect
        self.nonce = nonce or _counter()
        self.phase = Phase.IDLE
        self.session: int | None = None
        self.connected = False
        self.reported = State.NEUTRAL  # the public state as last reported
        self.failures = 0  # consecutive failures (P8)
        # consecutive terms whose become_active raised: winning again is no progress for
        # these, so only a term that ends otherwise, or whose work ran ``lasting_term``
        # before it failed, resets them (P8)
        self.active_failures = 0
        # consecutive refused fences of one breadcrumb (P8): never fatal, the fence backoff's
        # attempt; a fence of it that works, or another breadcrumb refused, resets the count
        self.fence_failures = 0
        self.fence_target: bytes | None = None
        # breadcrumbs fenced while a takeover was held up by another's refusal: not fenced
        # again on the next try (only those still read are kept); immutable: the empty one
        # is shared, and most electors never fence
        self.fenced: frozenset[bytes] = frozenset()
        self.backoff_token = 0
        self.holder = b""  # the leader's identity, as last seen
        self.epoch: int | None = None  # our token while leading
        # our place in the queue: the join's ticket (set before the create: P2), our node's
        # name and token once seen
        self.ticket: str | None = None
        self.node: str | None = None
        self.token: int | None = None
        # what we know of the queue below us: the names below ours (lowest first), and for
        # the leader's node its breadcrumb (None: none), whether it was seen deleted, and
        # whether breadcrumbs of dead nodes lie about (P6, P7)
        self.below: tuple[str, ...] = ()
        self.crumb: bytes | None = None
        self.crumb_gone = False
        self.strays = True
        self.departed: str | None = None  # a node below ours that left while others remain
        # a node we gave up, until its Leave is answered: sent again before each join and
        # whenever a listing still shows it, for a node of ours that nobody deletes would
        # stand in the queue while our session lives (first, it would block everyone)
        # (by ticket: node, keep_crumb; several when joins fail in a row)
        self.unleft: dict[str, tuple[str | None, bool]] = {}
        # P2: tickets of joins given up unseen (a lost reply, then a look that found nothing):
        # the join may still land, before our next one; that join's listing settles them
        self.landing: tuple[str, ...] = ()
        self.acted = False  # this ticket's term has started: its breadcrumb stays (P8, P9)
        self.to_fence: tuple[bytes, ...] = ()  # breadcrumbs still to fence before acting
        self.to_clear: tuple[str, ...] = ()  # their tickets, deleted once active
        # P16: the pause as last read (None: changed since, not known); a read's answer is
        # trusted only if no change of the pause node came after the read was asked for
        self.paused: bool | None = False
        self.pause_changes = 0
        self.pause_asked = 0

    @property
    def state(self) -> State:
        return self._shown(self.phase)

    def _shown(self, phase: Phase) -> State:
        """The public state ``phase`` shows: a HELD one keeps what was reported (P15)."""
        if phase in HELD and self.reported in (State.NEUTRAL, State.STANDBY):
            return self.reported
        return PUBLIC[phase]

    # ---------------------------------------------------------------------------------------

    def handle(self, event: ev.Input) -> list[ev.Effect]:
        """Apply one input; return the effects to execute, in order."""
        if isinstance(event, ev.Reconnected) and self.session is None:
            event = ev.Connected(event.session)  # we never saw this session begin: adopt it
        session = getattr(event, "session", None)
        if session is not None and not isinstance(event, ev.Connected) and session != self.session:
            return []  # P1: stale
        if self.phase not in HANDLED[type(event)]:
            return []  # irrelevant here (or too late): see the theory of operation
        handler = getattr(self, "_on_" + type(event).__name__)
        effects: list[ev.Effect] = handler(event)
        return effects

    # --- helpers ----------------------------------------------------------------------------

    def _go(
        self, phase: Phase, cause: str, effects: list[ev.Effect] | None = None
    ) -> list[ev.Effect]:
        """Move to ``phase``; if the public state changes, report it after ``effects`` (P14)."""
        out = list(effects or [])
        was, now = self.reported, self._shown(phase)
        self.phase = phase
        if now is not was:
            self.reported = now
            out.append(ev.Report(was, now, self.epoch if now is State.ACTIVE else None, cause))
            if now is State.STANDBY:
                out.append(ev.NotifyStandby(self.holder))
            elif now is State.NEUTRAL and phase not in (Phase.DONE, Phase.FAILED):
                out.append(ev.NotifyNeutral())
        return out

    def _stop_if_leading(self, cause: str) -> list[ev.Effect]:
        return [ev.StopActive(cause)] if self.phase in LEADING else []

    def _forget_queue(self) -> None:
        """Our node is gone or given up: the next join starts afresh (P2)."""
        self.ticket = self.node = self.token = None
        self.acted = False
        self.to_fence, self.to_clear = (), ()  # an earlier takeover's, never carried over
        self._forget_below()

    def _forget_below(self) -> None:
        self.below, self.crumb, self.crumb_gone, self.strays = (), None, False, True
        self.departed = None

    def _leave(self, *, keep_crumb: bool) -> list[ev.Effect]:
        """Delete our node if we may have one (and our breadcrumb unless kept, or unless this
        ticket ever acted: only a resign says that nobody needs fencing), forget it."""
        if self.ticket is not None and self.session is not None:
            self.unleft[self.ticket] = (self.node, keep_crumb or self.acted)
        self._forget_queue()
        return self._left()

    def _left(self) -> list[ev.Effect]:
        """The Leave of a node given up, once there is contact to send it."""
        if self.session is None or not self.connected:
            return []
        return [ev.Leave(self.session, t, *rest) for t, rest in self.unleft.items()]

    def _join(self, cause: str) -> list[ev.Effect]:
        if self.session is None or not self.connected:
            return self._go(Phase.CONNECTING if self.session is None else Phase.OFFLINE, cause)
        effects = self._left()
        self._forget_queue()
        self.ticket = ticket_for(self.identity, self.nonce())
        self.pause_asked = self.pause_changes
        return self._go(Phase.JOINING, cause, [*effects, ev.Join(self.session, self.ticket)])

    def _list(
        self, phase: Phase, cause: str, effects: list[ev.Effect] | None = None
    ) -> list[ev.Effect]:
        assert self.session is not None and self.ticket is not None
        listing = ev.ListQueue(self.session, self.ticket, self.token)
        self.pause_asked = self.pause_changes
        return self._go(phase, cause, [*(effects or []), listing])

    def _fail(self, error: str, *, lost: bool = False, fencing: bool = False) -> list[ev.Effect]:
        """P8/P9: stop, leave the queue, back off; fatal past the retry bound, unless a fence
        was refused (``fencing``: never fatal, its own backoff)."""
        acted = self.phase in LEADING
        effects = self._stop_if_leading(error)
        if fencing:
            attempt = self.fence_failures
        else:
            self.failures += 1
            attempt = max(self.failures, self.active_failures)
            if attempt > self.max_retries:
                return self._fatal(error, effects)
        effects += self._leave(keep_crumb=acted)
        self.backoff_token += 1
        self.epoch = None
        effects = self._go(Phase.FENCED if lost else Phase.BACKOFF, error, effects)
        effects.append(ev.WaitBackoff(attempt, self.backoff_token, fencing))
        return effects

    def _fatal(self, error: str, effects: list[ev.Effect] | None = None) -> list[ev.Effect]:
        acted = self.phase in LEADING
        out = self._stop_if_leading(error) if effects is None else list(effects)
        self._owe_landing()
        out += self._leave(keep_crumb=acted)
        self.epoch = None
        out = self._go(Phase.FAILED, error, out)
        out += [ev.NotifyFatal(error), ev.Finish(error)]
        return out

    def _lost(self, cause: str) -> list[ev.Effect]:
        """P9: authority lost while leading."""
        self.active_failures = 0  # the term ended for another reason than its work failing
        return self._fail(cause, lost=True)

    def _progress(self) -> None:
        self.failures = 0

    # --- handlers: lifecycle ----------------------------------------------------------------

    def _on_Joined(self, event: ev.Joined) -> list[ev.Effect]:
        return self._join("joined")

    def _on_QuitRequested(self, event: ev.QuitRequested) -> list[ev.Effect]:
        leading = self.phase in LEADING
        stop = self._stop_if_leading("quit")
        self._owe_landing()
        leave: list[ev.Effect]
        if not event.need_fence and self.acted and self.session is not None:
            # P13: even out of contact (the runner sends it once contact is back)
            assert self.ticket is not None and self.node is not None
            leave = [ev.Resign(self.session, self.ticket, self.node)]
            self._forget_queue()
        else:
            leave = self._leave(keep_crumb=leading)
        self.epoch = None
        # the report comes once the work has stopped (P14) and before we leave the queue: a
        # successor may act as soon as our node is gone, and is told after us
        effects = self._go(
            Phase.DONE, "quit (fence requested)" if event.need_fence else "quit", stop
        )
        return [*effects, *leave, ev.Finish()]

    # --- handlers: connection ---------------------------------------------------------------

    def _on_Connected(self, event: ev.Connected) -> list[ev.Effect]:
        if event.session == self.session:
            return self._on_Reconnected(ev.Reconnected(event.session))
        effects: list[ev.Effect] = []
        if self.session is not None:
            # a new session without a word about the old one: the old one is gone (P12)
            effects = self._on_SessionExpired(ev.SessionExpired(self.session))
        self.session, self.connected = event.session, True
        if self.phase in (Phase.CONNECTING, Phase.OFFLINE):
            return effects + self._join("connected")
        if self.phase in (Phase.DONE, Phase.FAILED):
            return effects
        return effects + self._left()  # P12: what the old session may have left behind

    def _on_Disconnected(self, event: ev.Disconnected) -> list[ev.Effect]:
        self.connected = False
        if self.phase in (Phase.ACTIVE, Phase.VERIFYING):
            if self.hold_on_disconnect:
                return self._go(Phase.DETACHED, "disconnected")  # P10: hold until the deadline
            self.epoch = None
            return self._go(Phase.OFFLINE, "disconnected", [ev.StopActive("disconnected")])
        if self.phase in (Phase.BACKOFF, Phase.FENCED, Phase.DETACHED, Phase.IDLE):
            return []  # the backoff ends by itself; joining then waits for contact
        return self._go(Phase.OFFLINE, "disconnected")

    def _on_Reconnected(self, event: ev.Reconnected) -> list[ev.Effect]:
        self.connected = True
        if self.phase in (Phase.DETACHED, Phase.OFFLINE) and self.ticket is None:
            return self._join("reconnected")  # we had not joined (it sends what is unleft)
        effects = self._left()
        if self.phase not in (Phase.DETACHED, Phase.OFFLINE):
            return effects
        self._forget_below()  # P11: what the watches said is not to be trusted now
        phase = Phase.VERIFYING if self.phase is Phase.DETACHED else Phase.LISTING
        return self._list(phase, "reconnected", effects)

    def _on_SessionExpired(self, event: ev.SessionExpired) -> list[ev.Effect]:
        # P12: our node went with the session, unless a request sent for it ran in the next
        # one (a join in flight across the expiry): leave again then, by ticket
        if self.ticket is not None:
            self.unleft[self.ticket] = (self.node, self.acted)
        self.session, self.connected = None, False
        if self.phase in LEADING:
            return self._lost("session expired")
        self._forget_queue()
        if self.phase in (Phase.BACKOFF, Phase.FENCED, Phase.IDLE):
            return []
        self.epoch = None
        return self._go(Phase.CONNECTING, "session expired")

    def _on_DeadlineExpired(self, event: ev.DeadlineExpired) -> list[ev.Effect]:
        self.epoch = None
        stop: list[ev.Effect] = [ev.StopActive("local deadline passed")]
        if self.connected and self.session is not None and self.ticket is not None:
            # the driver has not said it lost contact: stop anyway, then see where we stand
            self._forget_below()
            return self._list(Phase.LISTING, "local deadline passed", stop)
        return self._go(Phase.OFFLINE, "local deadline passed", stop)

    # --- handlers: the queue ----------------------------------------------------------------

    def _on_Queued(self, event: ev.Queued) -> list[ev.Effect]:
        self._progress()
        self._learn_pause(event.paused)
        self.node, self.token, self.holder = event.node, event.token, event.holder
        if self.phase is Phase.VERIFYING:  # P10: still first, carry on
            if event.below:
                return self._lost("no longer first in the queue")
            return self._go(Phase.ACTIVE, "still first in the queue")
        effects: list[ev.Effect] = []
        self._settle_landing(event.below)
        if self.unleft and any(
            e is not None and e.ticket in self.unleft for e in map(parse_entry, event.below)
        ):
            effects += self._left()  # our own node given up is still ahead of us
        if self.departed is not None and lower_lives(self.departed, event.below):
            departed = parse_entry(self.departed)
            assert departed is not None
            effects.append(ev.DropCrumb(event.session, departed.ticket))  # P5: never led
        self._forget_below()
        self.below = event.below
        if not event.below:
            if not event.strays:  # P7: no breadcrumb left by anyone: nobody to fence
                cause = "first in the queue, nobody to fence"
                return [*effects, *self._won(cause, announce=event.behind)]
            return self._first("first in the queue", effects)
        cause = "queued" if self.phase is Phase.JOINING else "listed"
        effects.append(ev.Watch(event.session, event.below[-1], len(event.below) == 1))
        self.pause_asked = self.pause_changes
        phase = Phase.REQUEUING if self.phase is Phase.REQUEUING else Phase.WATCHING
        return self._go(phase, cause, effects)

    def _on_NotQueued(self, event: ev.NotQueued) -> list[ev.Effect]:
        if self.phase is Phase.VERIFYING:
            return self._lost("our node is gone")
        if self.node is None and self.ticket is not None:
            self.landing += (self.ticket,)  # P2: the lost join had not applied yet
        return self._join("not in the queue")

    def _owe_landing(self) -> None:
        """P2: finishing, no next join will settle the joins given up unseen: each is owed a
        Leave by ticket like any node given up (the quit's, the release's), which finds it if
        it landed by then (``ha run`` may rejoin on the same session)."""
        for ticket in self.landing:
            self.unleft.setdefault(ticket, (None, False))  # it never acted
        self.landing = ()

    def _settle_landing(self, below: tuple[str, ...]) -> None:
        """P2: the listing that queued our latest join shows every join given up before it
        that ever landed (one lands before the next join or never): leave those, forget
        the rest."""
        if not self.landing:
            return
        for entry in map(parse_entry, below):
            if entry is not None and entry.ticket in self.landing:
                self.unleft[entry.ticket] = (entry.name, False)  # it never acted
        self.landing = ()

    def _on_Watching(self, event: ev.Watching) -> list[ev.Effect]:
        if not self.below or event.node != self.below[-1]:
            return []
        if not self._learn_pause(event.paused) and self.session is not None:
            # P16: the pause changed while we read: read it again (only after a pause event)
            phase = Phase.LISTING if self.phase is Phase.WATCHING else Phase.REQUEUING
            self._forget_below()
            return self._list(phase, "the pause changed")
        if len(self.below) == 1:
            self.crumb, self.strays = event.crumb, event.strays
            # a deletion seen before this answer was processed stands: the read was earlier
            self.crumb_gone = self.crumb_gone or event.crumb is None
        if self.phase is Phase.STANDBY:
            return []
        return self._go(Phase.STANDBY, "behind " + _who(self.holder))  # P4

    def _on_PredecessorGone(self, event: ev.PredecessorGone) -> list[ev.Effect]:
        return self._predecessor_gone(event.node)

    def _on_NodeDeleted(self, event: ev.NodeDeleted) -> list[ev.Effect]:
        if event.node == self.node:
            if self.phase in LEADING:
                return self._lost("our node was deleted")  # P9
            return self._fail("our node was deleted")  # from outside; we never acted on it
        if self.phase in WAITING:
            return self._predecessor_gone(event.node)
        return []

    def _on_Left(self, event: ev.Left) -> list[ev.Effect]:
        given_up = self.unleft.pop(event.ticket, None)
        if given_up is not None and given_up[0] is None and event.ticket not in self.landing:
            # P2: looked for by ticket, its join's outcome unknown: it may land after the look
            self.landing += (event.ticket,)
        return []

    def _on_NodeChanged(self, event: ev.NodeChanged) -> list[ev.Effect]:
        if len(self.below) > 1 and event.node == self.below[-1]:
            # P4: the node below ours announced that it leads: list again, to watch it (and
            # its breadcrumb) as the leader's, before it can leave
            self._forget_below()
            return self._list(Phase.REQUEUING, "the node below ours leads")
        return []

    def _on_CrumbDeleted(self, event: ev.CrumbDeleted) -> list[ev.Effect]:
        if len(self.below) == 1:
            entry = parse_entry(self.below[0])
            if entry is not None and entry.ticket == event.ticket:
                if not self.strays and self.session is not None:
                    self.below = ()
                    return self._won("the leader resigned")  # P6: its node went with it
                self.crumb_gone = True  # strays to fence, or not yet known: wait for the node
        return []

    def _predecessor_gone(self, node: str) -> list[ev.Effect]:
        """P5: the node below ours went; we lead if it was the only one below."""
        if not self.below or node != self.below[-1] or self.session is None:
            return []
        if len(self.below) > 1:
            # others remain below: look again (and drop its breadcrumb if it never led)
            self._forget_below()
            self.departed = node
            return self._list(Phase.REQUEUING, "the node below ours left")
        if self.crumb_gone and not self.strays:
            self.below = ()
            return self._won("the leader resigned")  # P6: no request at all
        if not self.strays and self.crumb is not None:
            # P7: the leader crashed; its breadcrumb was read while watching
            entry = parse_entry(node)
            assert entry is not None
            self.below = ()
            return self._fence([(entry.ticket, self.crumb)])
        self.below = ()
        return self._first("the leader left")

    def _first(self, cause: str, effects: list[ev.Effect] | None = None) -> list[ev.Effect]:
        """First in the queue with nothing known of who led before: read the breadcrumbs."""
        assert self.session is not None and self.ticket is not None and self.token is not None
        read = ev.ReadCrumbs(self.session, self.ticket, self.token)
        self.pause_asked = self.pause_changes
        return self._go(Phase.READING, cause, [*(effects or []), read])

    # --- handlers: taking over --------------------------------------------------------------

    def _on_CrumbsRead(self, event: ev.CrumbsRead) -> list[ev.Effect]:
        self._learn_pause(event.paused)
        return self._fence(list(event.crumbs))

    # --- the pause (P16) --------------------------------------------------------------------

    def _learn_pause(self, paused: bool) -> bool:
        """Take a read's answer about the pause; False when a change came after that read."""
        fresh = self.pause_asked == self.pause_changes
        self.paused = paused if fresh else None
        return fresh

    def _on_PauseChanged(self, event: ev.PauseChanged) -> list[ev.Effect]:
        self.pause_changes += 1
        self.paused = None  # until a read asked for from now on says
        if self.phase is Phase.PAUSED:
            return self._first("the pause changed")  # read again: resumed, or still paused
        if self.phase is Phase.STANDBY:
            self._forget_below()  # read the pause again now, not on the leader's exit
            return self._list(Phase.REQUEUING, "the pause changed")
        return []

    def _hold(self, cause: str) -> list[ev.Effect]:
        """First in the queue, the election paused (or not known not to be): take no lead."""
        self.below = ()
        self.to_fence, self.to_clear = (), ()  # read again once resumed
        if self.paused is None:
            return self._first(cause)  # a change since our last read: read it again
        return self._go(Phase.PAUSED, "paused: " + cause)

    def _fence(self, crumbs: list[tuple[str, bytes]]) -> list[ev.Effect]:
        """P7: fence each breadcrumb that is not ours, oldest first; then act. One fenced
        on an earlier try of this takeover is done (P8)."""
        self.to_clear = tuple(ticket for ticket, _ in crumbs)
        self.fenced &= {raw for _, raw in crumbs}
        self.to_fence = tuple(raw for _, raw in crumbs if self._to_fence(raw))
        return self._next_fence()

    def _to_fence(self, raw: bytes) -> bool:
        crumb = decode_breadcrumb(raw)
        return (crumb is None or crumb.identity != self.identity) and raw not in self.fenced

    def _next_fence(self) -> list[ev.Effect]:
        if self.paused is not False:
            return self._hold("before fencing")  # P16
        if not self.to_fence:
            self.fence_target, self.fence_failures, self.fenced = None, 0, frozenset()
            return self._won("won the election")
        assert self.session is not None
        raw = self.to_fence[0]
        return self._go(Phase.FENCING, "fencing old active", [ev.FenceOldActive(self.session, raw)])

    def _on_FenceSucceeded(self, event: ev.FenceSucceeded) -> list[ev.Effect]:
        raw, self.to_fence = self.to_fence[0], self.to_fence[1:]
        self.fenced |= {raw}
        if raw == self.fence_target:
            self.fence_target, self.fence_failures = None, 0
        return self._next_fence()

    def _on_FenceFailed(self, event: ev.FenceFailed) -> list[ev.Effect]:
        raw = self.to_fence[0]
        if raw != self.fence_target:  # a new incident: its own count of refusals
            self.fence_target, self.fence_failures = raw, 0
        self.fence_failures += 1
        return self._fail(f"fencing failed: {event.error}", fencing=True)

    def _won(self, cause: str, *, announce: bool = True) -> list[ev.Effect]:
        assert self.session is not None and self.node is not None and self.token is not None
        if self.paused is not False:
            return self._hold(cause)  # P16
        self._progress()
        self.epoch = self.token
        self.holder = self.identity
        self.acted = True
        # the report comes right after the start, before any call to the backend: a run
        # cancelled during one (a crash) must not leave a term started and never reported
        effects = self._go(
            Phase.ACTIVE, cause, [ev.StartActive(self.session, self.token, self.node)]
        )
        if self.to_clear:
            effects.append(ev.ClearCrumbs(self.session, self.node, self.to_clear))
            self.to_clear = ()
        effects.append(ev.Announce(self.session, self.node, announce))  # P4
        return effects

    # --- handlers: leading ------------------------------------------------------------------

    def _on_ActiveFailed(self, event: ev.ActiveFailed) -> list[ev.Effect]:
        if event.epoch != self.epoch:
            return []  # an older term's report
        if event.ran >= self.lasting_term:
            self.active_failures = 0  # the work ran well for a while: no failure in a row
        self.active_failures += 1  # backs off longer each time; fatal past max_retries
        return self._fail(f"become_active failed: {event.error}")

    def _on_Superseded(self, event: ev.Superseded) -> list[ev.Effect]:
        if event.epoch != self.epoch:
            return []  # an older lease's report
        return self._lost("a fenced write was refused")

    # --- handlers: failures and time --------------------------------------------------------

    def _on_BackoffElapsed(self, event: ev.BackoffElapsed) -> list[ev.Effect]:
        if event.token != self.backoff_token:
            return []  # the timer of an older backoff
        return self._join("backoff elapsed")

    def _on_OperationFailed(self, event: ev.OperationFailed) -> list[ev.Effect]:
        error = f"{event.operation} failed: {event.error}"
        if not event.transient:
            return self._fatal(error)
        if self.phase in LEADING:
            # a failed check while leading proves nothing: the deadline and events decide
            return []
        return self._fail(error)


def _counter() -> Callable[[], str]:
    """Nonces 1, 2, 3... (hex): enough where one process joins (tests, the diagram)."""
    count = iter(range(1, 1 << 62))
    return lambda: f"{next(count):x}"


def _who(identity: bytes) -> str:
    return identity.decode(errors="replace") or "?"
