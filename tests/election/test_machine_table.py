"""The machine as a whole: every phase x every input against the table (HANDLED), the
state diagram kept current, and a Hypothesis stateful test of the safety properties over
random, duplicated, reordered and stale inputs."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from ha.election import events as ev
from ha.election import machine as m
from ha.election.diagram import declared, diagram, document, moves, situations
from ha.election.machine import WAITING, Machine, Phase, State
from ha.election.names import decode_breadcrumb, parse_entry
from tests.support.machine import (
    L_CRUMB,
    L_TICKET,
    LEADER,
    M_CRUMB,
    M_TICKET,
    ME,
    MIDDLE,
    MY_OLD_CRUMB,
    MY_OLD_TICKET,
    OLD_CRUMB,
    OLD_TICKET,
    OTHER,
    S1,
    S2,
    TOKEN,
    check_effects,
    node_of,
)

# --- exhaustiveness: every phase x every input --------------------------------------------------


@pytest.mark.parametrize("phase", list(Phase), ids=lambda p: p.value)
@pytest.mark.parametrize("cls", ev.INPUT_TYPES, ids=lambda c: c.__name__)
def test_every_phase_handles_every_input(phase: Phase, cls: type[ev.Input]) -> None:
    for mach, event in situations(phase, cls):
        check_effects(mach, mach.state, mach.handle(event))


def snapshot(mach: Machine) -> dict[str, object]:
    # copies: a handler may change a list or dict in place
    return {name: copy.copy(getattr(mach, name)) for name in Machine.__slots__ if name != "nonce"}


def placed(phase: Phase, cls: type[ev.Input]) -> Iterator[tuple[Machine, ev.Input]]:
    """The diagram's situations, and for Left a node given up under the answer's ticket in the
    machine's session: Left moves no phase, its whole work is to end the Leave's repeats."""
    for mach, event in situations(phase, cls):
        if isinstance(event, ev.Left) and mach.session is not None:
            mach.unleft = {event.ticket: (None, False)}
        yield mach, event


@pytest.mark.parametrize("cls", ev.INPUT_TYPES, ids=lambda c: c.__name__)
def test_an_input_outside_the_table_changes_nothing(cls: type[ev.Input]) -> None:
    """HANDLED is the whole policy on stale and irrelevant input: outside it, in every
    situation, an input neither returns effects nor moves anything in the machine."""
    for phase in Phase:
        if phase in m.HANDLED[cls]:
            continue
        for mach, event in placed(phase, cls):
            before = snapshot(mach)
            assert mach.handle(event) == [], (phase, event)
            assert snapshot(mach) == before, (phase, event)


@pytest.mark.parametrize("cls", ev.INPUT_TYPES, ids=lambda c: c.__name__)
def test_every_phase_in_the_table_can_act_on_its_input(cls: type[ev.Input]) -> None:
    """The table is no wider than the handlers: each phase it lists acts in some situation."""
    assert m.HANDLED[cls], cls
    assert not m.HANDLED[cls] & {Phase.DONE, Phase.FAILED}
    for phase in m.HANDLED[cls]:
        for mach, event in placed(phase, cls):
            before = snapshot(mach)
            if mach.handle(event) or snapshot(mach) != before:
                break
        else:
            pytest.fail(f"{cls.__name__} never acts in {phase}")


def test_the_table_covers_every_input() -> None:
    assert set(m.HANDLED) == set(ev.INPUT_TYPES)


def test_the_moves_declared_are_the_moves_the_handlers_make() -> None:
    """MOVES is data the diagram is drawn from: every move a handler makes, in every situation,
    is declared there, and every move declared there is made in some situation."""
    for cls, table in m.MOVES.items():
        assert set(table) <= m.HANDLED[cls], cls
        for phase, targets in table.items():
            assert phase not in targets, (cls, phase)
    assert set(m.MOVES) == set(ev.INPUT_TYPES)
    assert moves() == declared()


def test_the_state_diagram_document_is_current() -> None:
    doc = (Path(__file__).parents[2] / "docs" / "states.md").read_text()
    hint = "regenerate docs/states.md with python -m ha.election.diagram > docs/states.md"
    assert diagram() in doc, hint
    assert doc == document(), hint


# --- Hypothesis: random, duplicated, reordered and stale inputs ---------------------------------

TICKET_OF = {LEADER: L_TICKET, MIDDLE: M_TICKET}
CRUMB_OF = {L_TICKET: L_CRUMB, M_TICKET: M_CRUMB}
# what ReadCrumbs may answer, oldest first (a subsequence is drawn)
LEFT = (
    (OLD_TICKET, OLD_CRUMB),
    (MY_OLD_TICKET, MY_OLD_CRUMB),
    ("junk_j", b"\xffjunk"),
    (L_TICKET, L_CRUMB),
    (M_TICKET, M_CRUMB),
)
BELOW = ((), (LEADER,), (MIDDLE,), (LEADER, MIDDLE))
# input kinds to draw from: a quit ends the run, so it comes more rarely
KINDS = [c for c in ev.INPUT_TYPES if c is not ev.QuitRequested] * 4 + [ev.QuitRequested]


def seq(node: str) -> int:
    entry = parse_entry(node)
    assert entry is not None
    return entry.seq


def must_fence(raw: bytes) -> bool:
    """P7: every breadcrumb is fenced but one naming our own identity."""
    found = decode_breadcrumb(raw)
    return found is None or found.identity != ME


class MachineModel(RuleBasedStateMachine):
    """Feeds the machine inputs that are mostly plausible (its own session, its own node,
    breadcrumbs that match their tickets) and checks, after every input:

    - the public reports chain and make only LEGAL changes; StopActive comes before any
      report away from ACTIVE (P14); the scope is open exactly in the leading phases, and
      never twice: no two StartActive without a StopActive between;
    - fencing before acting (P6, P7), stated on the run's own inputs and effects: take the
      last ReadCrumbs or Watch(first=True) effect since the last Join, ListQueue or loss of
      contact (there must be one). After a ReadCrumbs, the machine acted on a CrumbsRead
      answer, and every breadcrumb in it that does not name our identity was handed to
      FenceOldActive and a FenceSucceeded came back, before the StartActive (on this try
      or an earlier one: a breadcrumb fenced once stays fenced, P8). After a
      Watch(first=True) of node L, the machine acted on a Watching(L) answer saying no
      strays, and either L's breadcrumb was seen gone (that answer's crumb None, or a
      CrumbDeleted of L's ticket acted on) or the breadcrumb read was ours or was fenced;
    - FenceOldActive is only ever handed a breadcrumb the machine was told of, never ours;
    - ClearCrumbs only follows a StartActive; Resign, and Leave(keep_crumb=False) of the
      node the scope was opened on, only while no scope is open (a breadcrumb goes only once
      the work has stopped; an older node given up and left again is not the scope's);
    - a quit without a fence resigns the ticket whose term began, if its session lives, in
      or out of contact (P13): its breadcrumb is never kept for a clean quit;
    - every node given up is left until its Leave is answered: while a Leave is owed (sent,
      or in the machine's ``unleft``, with no Left of its ticket acted on in that session),
      the machine keeps it in ``unleft``, sends it before every Join in that session, and
      again when a listing shows its node below ours. The runner answers a Leave with Left,
      or not at all (a leave that failed), or late;
    - DropCrumb (P5) only for a node below which a live node was just listed.
    """

    def __init__(self) -> None:
        super().__init__()
        self.mach = Machine(ME, max_retries=3)
        self.state = State.NEUTRAL
        self.scope_open = False
        self.scope_ticket: str | None = None
        self.owed: dict[str, ev.Leave] = {}  # by ticket: the Leaves sent again until answered
        self.finished = False
        # breadcrumbs whose fence worked, on any try: they stay fenced (their tickets never
        # lead again, P3), so a later takeover may skip them (P8)
        self.fenced: set[bytes] = set()
        self.forget()

    def forget(self) -> None:
        self.path: tuple[str, str] | None = None  # ("read", "") or ("watch", node)
        self.crumbs_read: tuple[tuple[str, bytes], ...] | None = None
        self.strays: bool | None = None
        self.watched: bytes | None = None
        self.gone = False
        self.fencing: bytes | None = None

    @initialize(hold=st.booleans())
    def policy(self, hold: bool) -> None:
        self.mach.hold_on_disconnect = hold

    # --- inputs --------------------------------------------------------------------------

    def draw_input(self, data: st.DataObject) -> ev.Input:
        mach = self.mach
        cls = data.draw(st.sampled_from(KINDS))
        sid = data.draw(st.sampled_from([mach.session or S1] * 4 + [S1, S2]))
        own = node_of(mach.ticket or MY_OLD_TICKET, 3)
        node = data.draw(st.sampled_from([LEADER, MIDDLE, own]))
        if cls is ev.Joined:
            return ev.Joined()
        if cls is ev.QuitRequested:
            return ev.QuitRequested(data.draw(st.booleans()))
        if cls in (ev.Connected, ev.Disconnected, ev.Reconnected, ev.SessionExpired):
            return cls(sid)
        if cls in (ev.NotQueued, ev.FenceSucceeded, ev.DeadlineExpired, ev.PauseChanged):
            return cls(sid)
        if cls is ev.Queued:
            below = data.draw(st.sampled_from(BELOW))
            return ev.Queued(sid, own, TOKEN, below, data.draw(st.sampled_from([OTHER, ME])))
        if cls is ev.Watching:
            node = data.draw(st.sampled_from([LEADER, MIDDLE]))
            raw = data.draw(st.sampled_from([CRUMB_OF[TICKET_OF[node]], None]))
            return ev.Watching(sid, node, raw, data.draw(st.booleans()))
        if cls is ev.PredecessorGone:
            return ev.PredecessorGone(sid, data.draw(st.sampled_from([LEADER, MIDDLE])))
        if cls is ev.NodeDeleted:
            return ev.NodeDeleted(sid, node)
        if cls is ev.NodeChanged:
            return ev.NodeChanged(sid, node)
        if cls is ev.CrumbDeleted:
            tickets = [L_TICKET, M_TICKET, mach.ticket or MY_OLD_TICKET]
            return ev.CrumbDeleted(sid, data.draw(st.sampled_from(tickets)))
        if cls is ev.Left:
            tickets = [*self.owed, MY_OLD_TICKET, L_TICKET, mach.ticket or MY_OLD_TICKET]
            return ev.Left(sid, data.draw(st.sampled_from(tickets)))
        if cls is ev.CrumbsRead:
            mask = data.draw(st.lists(st.booleans(), min_size=len(LEFT), max_size=len(LEFT)))
            return ev.CrumbsRead(sid, tuple(c for c, keep in zip(LEFT, mask, strict=True) if keep))
        if cls is ev.FenceFailed:
            return ev.FenceFailed(sid, "refused")
        if cls in (ev.ActiveFailed, ev.Superseded):
            epoch = data.draw(st.sampled_from([mach.epoch or TOKEN, TOKEN - 1]))
            return (
                ev.ActiveFailed(sid, epoch, "boom")
                if cls is ev.ActiveFailed
                else ev.Superseded(sid, epoch)
            )
        if cls is ev.BackoffElapsed:
            return ev.BackoffElapsed(mach.backoff_token - data.draw(st.sampled_from([0, 1])))
        assert cls is ev.OperationFailed
        transient = data.draw(st.sampled_from([True] * 9 + [False]))
        return ev.OperationFailed(sid, "op", "boom", transient)

    @rule(data=st.data())
    def feed_random(self, data: st.DataObject) -> None:
        self.feed(self.draw_input(data))

    # What the runner or the backend would say next in the machine's phase, as two rules (so
    # drawn twice as often): this reaches the deep states (standby, fencing, active) far more
    # often than chance.
    @rule(data=st.data())
    def respond(self, data: st.DataObject) -> None:
        self.feed(data.draw(st.sampled_from(self.likely(data))))

    @rule(data=st.data())
    def respond_too(self, data: st.DataObject) -> None:
        self.feed(data.draw(st.sampled_from(self.likely(data))))

    def likely(self, data: st.DataObject) -> list[ev.Input]:
        # a Leave owed is answered, or not (that leave failed), or another one is (a late
        # answer for a node given up before): choices among the others
        answers: list[ev.Input] = []
        if self.owed:
            owed = data.draw(st.sampled_from(sorted(self.owed.values(), key=str)))
            late = data.draw(st.sampled_from([MY_OLD_TICKET, self.mach.ticket or L_TICKET]))
            answers = [ev.Left(owed.session, owed.ticket), ev.Left(owed.session, late)]
        return self.likely_in_phase(data) + answers

    def likely_in_phase(self, data: st.DataObject) -> list[ev.Input]:
        mach, sid = self.mach, self.mach.session or S1
        own = node_of(mach.ticket or MY_OLD_TICKET, 3)
        if mach.phase in WAITING and mach.below:
            # the watch's answer, or what the watches then see: a breadcrumb, a node go
            node = mach.below[-1]
            raw = data.draw(st.sampled_from([CRUMB_OF[TICKET_OF[node]], None]))
            other = [t for t in (L_TICKET, M_TICKET, own) if t != TICKET_OF[node]]
            return [
                ev.Watching(sid, node, raw, data.draw(st.booleans())),
                ev.CrumbDeleted(sid, TICKET_OF[node]),
                ev.CrumbDeleted(sid, data.draw(st.sampled_from(other))),
                ev.NodeDeleted(sid, node),
                ev.NodeChanged(sid, node),  # it announced that it leads
            ]
        if mach.phase in (Phase.JOINING, Phase.LISTING, Phase.REQUEUING, Phase.VERIFYING):
            # a node of ours given up may still stand below ours
            given_up = tuple((node_of(t, 0), LEADER) for t in self.owed)
            below = data.draw(st.sampled_from(BELOW + given_up))
            return [ev.Queued(sid, own, TOKEN, below, OTHER if below else ME), ev.NotQueued(sid)]
        if mach.phase is Phase.READING:
            mask = data.draw(st.lists(st.booleans(), min_size=len(LEFT), max_size=len(LEFT)))
            return [ev.CrumbsRead(sid, tuple(c for c, k in zip(LEFT, mask, strict=True) if k))]
        if mach.phase is Phase.FENCING:
            fences: list[ev.Input] = [ev.FenceSucceeded(sid)] * 3
            return [*fences, ev.FenceFailed(sid, "refused")]
        if mach.phase in m.LEADING:
            epoch = mach.epoch or TOKEN
            return [
                ev.QuitRequested(False),
                ev.QuitRequested(True),
                ev.Disconnected(sid),
                ev.Reconnected(sid),
                ev.DeadlineExpired(sid),
                ev.NodeDeleted(sid, own),
                ev.Superseded(sid, epoch),
                ev.ActiveFailed(sid, epoch, "boom"),
                ev.SessionExpired(sid),
            ]
        if mach.phase in (Phase.BACKOFF, Phase.FENCED):
            return [ev.BackoffElapsed(mach.backoff_token)]
        if mach.phase is Phase.OFFLINE:
            return [ev.Reconnected(sid)]
        if mach.phase is Phase.CONNECTING:
            return [ev.Connected(S1), ev.Connected(S2)]
        return [ev.Joined()]

    # --- the checks ------------------------------------------------------------------------

    def feed(self, event: ev.Input) -> None:
        mach = self.mach
        session = getattr(event, "session", None)
        acted = mach.phase in m.HANDLED[type(event)] and session == mach.session
        owed, listing = dict(self.owed), acted and mach.phase is not Phase.VERIFYING
        was_connected, old_session = mach.connected, mach.session
        resigns = (
            isinstance(event, ev.QuitRequested)
            and not event.need_fence
            and mach.phase in m.HANDLED[ev.QuitRequested]
            and mach.acted
            and mach.session is not None
        )
        resign = ev.Resign(mach.session or 0, mach.ticket or "", mach.node or "")
        before = mach.phase
        effects = mach.handle(event)
        if mach.phase is not before:  # only the moves of the table (MOVES)
            assert mach.phase in m.MOVES[type(event)].get(before, ()), (before, event, mach.phase)
        if self.finished:
            assert effects == []
            return
        if resigns:
            assert resign in effects, (resign, effects)
        self.state = check_effects(mach, self.state, effects)
        if isinstance(event, ev.Queued) and listing and owed:
            for ticket in {e.ticket for e in map(parse_entry, event.below) if e} & set(owed):
                assert owed[ticket] in effects, f"{owed[ticket]} still listed, not sent again"
        self.learn(event, acted, was_connected, old_session)
        for i, effect in enumerate(effects):
            self.check(event, effect, effects[:i])
        assert self.scope_open == (mach.phase in m.LEADING), (mach.phase, effects)
        if mach.session is not None:
            for ticket, (node, keep_crumb) in mach.unleft.items():
                # a node given up out of contact: no Leave yet
                self.owed.setdefault(ticket, ev.Leave(mach.session, ticket, node, keep_crumb))
        if not self.finished:
            for ticket, leave in self.owed.items():
                assert ticket in mach.unleft, f"{leave} dropped unanswered on {event}"
                assert mach.unleft[ticket] == (leave.node, leave.keep_crumb), mach.unleft

    def learn(
        self, event: ev.Input, acted: bool, was_connected: bool, old_session: int | None
    ) -> None:
        """Record what the machine was told, as far as it acted on it (the table says so)."""
        if isinstance(event, ev.Connected) and old_session not in (None, event.session):
            self.forget()  # a new session: the old one's knowledge is void
            self.owed = {}  # and its nodes went with it
        if not acted:
            return
        if isinstance(event, ev.SessionExpired):
            self.owed = {}
        if isinstance(event, ev.Left):
            self.owed.pop(event.ticket, None)
        if isinstance(event, ev.Disconnected | ev.SessionExpired) or (
            isinstance(event, ev.Reconnected) and not was_connected
        ):
            self.forget()  # P11: what the watches said before is not to be trusted
        elif isinstance(event, ev.CrumbsRead) and self.path == ("read", ""):
            if self.crumbs_read is None:
                self.crumbs_read = event.crumbs
        elif isinstance(event, ev.Watching) and self.path == ("watch", event.node):
            self.strays, self.watched = event.strays, event.crumb
            self.gone = self.gone or event.crumb is None
        elif isinstance(event, ev.CrumbDeleted) and self.path is not None:
            if self.path[0] == "watch" and TICKET_OF[self.path[1]] == event.ticket:
                self.gone = True
        elif isinstance(event, ev.FenceSucceeded) and self.fencing is not None:
            self.fenced.add(self.fencing)
            self.fencing = None
        elif isinstance(event, ev.FenceFailed):
            self.fencing = None

    def check(self, event: ev.Input, effect: ev.Effect, before: list[ev.Effect]) -> None:
        previous = before[-1] if before else None
        match effect:
            case ev.Join(session=session):
                self.forget()
                for leave in self.owed.values():
                    if leave.session == session:
                        assert leave in before, f"joined before leaving {leave}: {before}"
            case ev.ListQueue():
                self.forget()
            case ev.Watch(node=node, first=first):
                self.forget()
                self.path = ("watch", node) if first else None
            case ev.ReadCrumbs():
                self.forget()
                self.path = ("read", "")
            case ev.FenceOldActive(breadcrumb=raw):
                told = [r for _, r in self.crumbs_read or ()] + [self.watched or b""]
                assert raw in told and must_fence(raw), (raw, told)
                self.fencing = raw
            case ev.StartActive(node=node):
                assert not self.scope_open, "two leadership scopes at once"
                self.check_fenced()
                self.scope_open = True
                entry = parse_entry(node)
                assert entry is not None
                self.scope_ticket = entry.ticket
            case ev.ClearCrumbs():
                # right after the start and its report (P14), before any other call
                assert isinstance(previous, ev.Report) and self.scope_open, previous
            case ev.StopActive():
                self.scope_open = False
            case ev.Resign():
                assert not self.scope_open, f"breadcrumb deleted while the work runs: {effect}"
            case ev.Leave(keep_crumb=keep_crumb, ticket=ticket):
                self.owed[ticket] = effect
                if not keep_crumb and self.scope_open:
                    assert ticket != self.scope_ticket, (
                        f"breadcrumb deleted while the work runs: {effect}"
                    )
            case ev.DropCrumb(ticket=ticket):
                assert isinstance(event, ev.Queued), event
                [gone] = [seq(n) for n, t in TICKET_OF.items() if t == ticket]
                assert any(seq(n) < gone for n in event.below), (ticket, event.below)
            case ev.Finish():
                self.finished = True

    def check_fenced(self) -> None:
        """No StartActive without proof that nobody else may still act (P6, P7)."""
        assert self.path is not None, "StartActive with nothing read or watched"
        if self.path[0] == "read":
            assert self.crumbs_read is not None, "StartActive before the breadcrumbs were read"
            for ticket, raw in self.crumbs_read:
                assert not must_fence(raw) or raw in self.fenced, ("not fenced", ticket)
            return
        assert self.strays is False, "StartActive on a watch that did not rule out strays"
        if not self.gone:
            assert self.watched is not None
            assert not must_fence(self.watched) or self.watched in self.fenced, "not fenced"

    @invariant()
    def public_state_matches_phase(self) -> None:
        assert self.mach.state is self.state
        if self.mach.phase in m.HELD:  # P15: taking over shows the state it began in
            assert self.state in (State.NEUTRAL, State.STANDBY)
        else:
            assert self.state is m.PUBLIC[self.mach.phase]
        if self.mach.phase in m.LEADING:
            assert self.mach.epoch == self.mach.token is not None


MachineModel.TestCase.settings = settings(
    max_examples=400,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestMachineModel = MachineModel.TestCase
