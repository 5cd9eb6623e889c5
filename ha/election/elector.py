"""The elector runner: the one place that awaits. It asks the machine what to do and does it.

One task runs the loop: it takes an input (driver events first, then the outcome of the last
effect, then timers), hands it to ``Machine.handle`` and executes the effects in order: backend
calls through ``ElectionNodes`` (``nodes.py``), each bounded by the op timeout, the contender's
hooks, timers, the leadership scope and the reports. Where the rest lives:

- ``leadership.py``: the contender's ``become_active`` in a second task, in a cancel scope that
  ``StopActive`` cancels and then awaits (so nobody is told of any other state while the work
  may still run), with the watchdog that stops it on the local deadline; the timing assumption
  it relies on is written there.
- ``reporting.py``: where each public transition goes (log, journal, listeners, streams,
  counts) and the records ``statistics()`` returns.
- ``watching.py``: the queue nodes it watches; their events become the machine's inputs.
"""

from __future__ import annotations

import logging
import random
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import anyio.abc

from ..drivers.base import (
    ConnectionEvent,
    ConnectionState,
    Driver,
    validate_path,
)
from ..errors import ConfigurationError, CorruptData, DriverError, ElectionFailed, SessionExpired
from . import events as ev
from . import machine as m
from .admission import join_turns
from .contender import call_hook, check_contender, fence_old_active
from .departures import departures_of
from .history import FenceFailure, Term, append_term, record_fence_failure
from .inbox import Inbox
from .journal import JournalWriter, Transition
from .leadership import Leadership
from .lease import Lease
from .machine import State
from .names import Breadcrumb, check_priority, decode_breadcrumb, identity_bytes, nonce
from .nodes import ElectionNodes
from .reporting import ElectorStatistics, FencingStatistics, Reporting, TransitionStream
from .timing import Timing, check_deadline
from .watching import QueueWatches

__all__ = ("Elector",)

log = logging.getLogger("ha.elector")
QUICK = 1.0  # seconds for each step of a cancelled run's quit (leaving the queue: best effort)
_SHARED_RNG = random.Random()
_DEFAULT_TIMING = Timing()  # frozen: one for every elector not given its own


class Elector:
    """Takes part in the election at ``path`` on ``driver`` as ``identity``.

    ``await elector.run(contender)`` returns when the election is quit (``quit()``); it raises
    ``ElectionFailed`` after a fatal error. Also ``await task_group.start(elector.run, c)``.
    The nodes it uses are drawn in ``nodes.py`` (``elector.nodes``). ``priority`` (0: none) is
    published with each join, for a preferred leader (``names.py``).
    """

    __slots__ = (
        "driver", "path", "identity", "data", "timing", "nodes",
        "_journal_spec", "_reporting", "_rng", "_machine", "_state", "_lease",
        "_leadership", "_backoff_at", "_closed",
        "_quit_pending", "_fencing", "_refusal", "_unresigned", "_watches", "priority", "_term",
        "_fenced", "_inbox",
    )  # fmt: skip

    def __init__(
        self,
        driver: Driver,
        path: str,
        identity: bytes | str,
        *,
        data: bytes = b"",
        timing: Timing | None = None,
        journal: JournalWriter | str | None = None,
        seed: int | None = None,
        priority: int = 0,
    ) -> None:
        if not isinstance(driver, Driver):
            raise ConfigurationError(f"driver must be an ha driver, got {type(driver).__name__}")
        validate_path(path)
        if path == "/":
            raise ConfigurationError("the election path must not be the root '/'")
        self.driver = driver
        self.path = path
        self.identity = identity_bytes(identity)
        self.data = bytes(data)
        self.timing = timing or _DEFAULT_TIMING
        check_deadline(self.timing, driver.session_timeout, driver.renewal_interval)
        self.priority = check_priority(priority)  # published in each join's ticket
        self.nodes = ElectionNodes(path)
        # a path is opened for each run and closed after it; a writer given is the caller's
        self._journal_spec = journal
        self._reporting = Reporting(path, self.identity, driver)
        # one generator for all electors unless seeded: a Random costs ~2.5 KB per elector
        self._rng = _SHARED_RNG if seed is None else random.Random(seed)
        self._machine = m.Machine(
            self.identity,
            max_retries=self.timing.max_retries,
            lasting_term=self.timing.lasting_term,
            hold_on_disconnect=self.timing.hold_on_disconnect,
            nonce=self._nonce,  # a bound method: a lambda and its cell cost ~130 B more
        )
        self._state = State.NEUTRAL
        self._lease: Lease | None = None
        self._inbox: Inbox[ev.Input] | None = None  # while a run lasts
        self._leadership = Leadership(
            driver, self.timing, self.nodes, self.identity, self._machine, self._feed
        )
        self._backoff_at: tuple[float, int] | None = None
        self._closed = False
        self._quit_pending: ev.QuitRequested | None = None
        # refused fences as last counted: (old active's identity, refusals in a row, error),
        # set with the backoff that follows them (one reading for the log, the statistics and
        # the history); None after a fence that works, or once someone leads
        self._fencing: tuple[str, int, str] | None = None
        self._refusal: tuple[str, str] | None = None  # the last refusal, until counted
        # a resign that failed (or waited for contact), sent again as one after the quit: the
        # machine, done, holds nothing
        self._unresigned: dict[str, ev.Resign] = {}
        self._watches = QueueWatches(driver, self.nodes, self._session, self._feed)
        self._term: Term | None = None  # the term begun, for the history (``history.py``)
        self._fenced: tuple[str, ...] = ()  # whom this takeover fenced, for the term's cause

    def _nonce(self) -> str:
        return nonce(self._rng.getrandbits(32), self.priority)

    def _session(self) -> int | None:
        return self._machine.session

    # --- public -------------------------------------------------------------------------------

    @property
    def counts(self) -> Counter[tuple[str, str]]:
        """How often each public change happened: ``counts["neutral", "active"]``."""
        return self._reporting.counts

    @property
    def state(self) -> State:
        """The public state as last reported (ACTIVE only while the leadership scope may run)."""
        return self._state

    @property
    def lease(self) -> Lease | None:
        """The current lease while ACTIVE."""
        return self._lease if self._state is State.ACTIVE else None

    def quit(self, need_fence: bool = False) -> None:
        """Leave the election; ``run`` returns once done. ``need_fence=False`` deletes our
        breadcrumb with our node once we have led (after a lost contact, once it is back) so
        the next active does not fence us."""
        self._feed(ev.QuitRequested(need_fence))
        if self._inbox is not None:
            # a quit stops the term whatever the machine's phase (P14): begin now, the loop's
            # StopActive then waits for the work (a handover starts one task switch sooner)
            self._leadership.cancel()

    def statistics(self) -> ElectorStatistics:
        """A snapshot of the elector's state, its transition counts and refused fences."""
        fencing = None
        if self._fencing is not None:
            old, count, error = self._fencing
            retry = None
            if self._backoff_at is not None:
                retry = max(0.0, self._backoff_at[0] - anyio.current_time())
            fencing = FencingStatistics(old, count, error, retry)
        holder = None
        if self._state is State.ACTIVE:
            holder = self.identity
        elif self._state is State.STANDBY:
            holder = self._machine.holder or None
        term = self._term if self._state is State.ACTIVE else None
        return ElectorStatistics(
            self._state,
            self._lease.epoch if self._lease else None,
            self._reporting.transition_counts(),
            fencing,
            holder=None if holder is None else holder.decode(errors="replace"),
            paused=self._machine.paused,
            active_since=None if term is None else term.started,
        )

    def fencing_note(self) -> str | None:
        """ "fencing 'x' failed 5 times, next try in 8s" while fences keep being refused."""
        fencing = self.statistics().fencing
        return None if fencing is None else fencing.note()

    async def contenders(self) -> list[bytes]:
        """The identities in the queue, in order: the leader (or the one about to lead)
        first, then the standbys in the order they would take over. Read from the backend."""
        return [entry.identity for entry in await self.nodes.entries(self.driver)]

    def add_listener(self, callback: Callable[[Transition], None]) -> None:
        """Call ``callback(transition)`` synchronously on every transition (must not block)."""
        self._reporting.add_listener(callback)

    def transitions(self) -> TransitionStream:
        """Every transition from now on: ``async for t in elector.transitions()``, or
        ``async with elector.transitions() as stream: async for t in stream`` to close it at
        the block's end (``reporting.TransitionStream``)."""
        return TransitionStream(self._reporting)

    async def wait_active(self) -> Lease:
        """Block until this elector is ACTIVE (judged on waking: a leadership already lost
        again is waited past); return its lease. Before ``run`` it waits for the run; if the
        run ends first, raises ``ElectionFailed`` (fatal error) or ``ElectorStopped`` (quit,
        cancelled). Cancelling the wait loses nothing."""
        await self._reporting.wait_until(lambda: self.lease is not None, "it was active")
        assert self._lease is not None
        return self._lease

    async def wait_state(self, *states: State) -> State:
        """Block until the public state is one of ``states``; return it. Like ``wait_active``
        (same errors), except that a run that ended in one of ``states`` returns it."""
        if not states:
            raise ConfigurationError("wait_state() needs at least one State")
        what = "it was " + " or ".join(s.value for s in states)
        await self._reporting.wait_until(lambda: self._state in states, what)
        return self._state

    async def run(
        self,
        contender: object,
        *,
        task_status: anyio.abc.TaskStatus[Elector] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        check_contender(contender)
        if self._inbox is not None:
            raise RuntimeError("this elector is already running")
        if self._machine.phase in (m.Phase.DONE, m.Phase.FAILED):
            raise RuntimeError("this elector has finished; make a new Elector to rejoin")
        inbox = self._inbox = Inbox[ev.Input]()
        error: str | None = None
        quit = False
        spec = self._journal_spec
        journal = self._reporting.journal = JournalWriter(spec) if isinstance(spec, str) else spec
        subs = [
            self.driver.subscribe(None, self._on_connection),
            self._watches.pause(),
        ]
        try:
            try:
                async with anyio.create_task_group() as tg:
                    sid = self.driver.session_id
                    if sid is not None:  # catch up with the driver's state before joining
                        self._feed(ev.Connected(sid))
                        if not self.driver.connected:
                            self._feed(ev.Disconnected(sid))
                    self._feed(ev.Joined())
                    if self._quit_pending is not None:
                        self._feed(self._quit_pending)
                    task_status.started(self)
                    # the loop is here, not in a method of its own: an idle elector sleeps in
                    # this chain of frames, and each coroutine in it costs 300 B (issue 31)
                    outcomes: list[ev.Input] = []  # rarely more than one; a deque: 600 B
                    finished = False
                    while not finished:
                        event = self._next_input(inbox, outcomes)
                        if event is None:
                            arrival = inbox.arrival()
                            if self._backoff_at is None:
                                await arrival.wait()
                                continue
                            when, token = self._backoff_at
                            with anyio.move_on_after(when - anyio.current_time()):
                                await arrival.wait()
                                continue
                            event = ev.BackoffElapsed(token)
                            self._backoff_at = None
                        finished, error = await self._handle(event, tg, contender, outcomes)
                    # done, the machine acts on nothing: the release reads the outcomes left
                    quit = error is None
                    if error is None:
                        await self._release_after_quit(outcomes)
                    tg.cancel_scope.cancel()
            finally:
                inbox.close()  # inputs from now on are dropped: the run is ending
        finally:
            for sub in subs:
                sub.close()
            self._watches.close()
            with anyio.CancelScope(shield=True):
                await self._leadership.stop("elector stopped")
                if self._machine.phase not in (m.Phase.DONE, m.Phase.FAILED):
                    await self._quit_cancelled(contender)
            self._inbox = None
            if isinstance(spec, str) and journal is not None:
                journal.close()
            how = "failed" if error is not None else "quit" if quit else "stopped"
            self._reporting.end(how, error)  # wakes wait_active(): after the last report
        if error is not None:  # raised outside the task group: a plain exception, not a group
            raise ElectionFailed(f"election {self.path} as {self.identity!r} failed: {error}")

    # --- event intake -------------------------------------------------------------------------

    def _feed(self, event: ev.Input) -> None:
        if self._inbox is None:
            if isinstance(event, ev.QuitRequested):
                self._quit_pending = event  # quit before run: run() leaves at once
            return
        self._inbox.put(event)  # dropped once the run is ending

    def _on_connection(self, event: ConnectionEvent) -> None:
        sid = event.session_id
        if event.state is ConnectionState.CLOSED:
            self._closed = True
            if self._machine.session is not None:
                self._feed(
                    ev.OperationFailed(self._machine.session, "driver", "driver closed", False)
                )
            return
        if sid is None:
            return
        if event.state is ConnectionState.EXPIRED:
            self._leadership.session_ended(sid)
        mapping: dict[ConnectionState, Callable[[int], ev.Input]] = {
            ConnectionState.CONNECTED: ev.Connected,
            ConnectionState.DISCONNECTED: ev.Disconnected,
            ConnectionState.RECONNECTED: ev.Reconnected,
            ConnectionState.EXPIRED: ev.SessionExpired,
        }
        self._feed(mapping[event.state](sid))

    # --- the loop -----------------------------------------------------------------------------

    async def _handle(
        self,
        event: ev.Input,
        tg: anyio.abc.TaskGroup,
        contender: object,
        outcomes: list[ev.Input],
    ) -> tuple[bool, str | None]:
        """Hand ``event`` to the machine and carry out its effects, keeping their outcomes in
        ``outcomes``; whether the machine finished, and its fatal error, if any."""
        was = self._machine.phase
        effects = self._machine.handle(event)
        if self._machine.phase is m.Phase.PAUSED and was is not m.Phase.PAUSED:
            self._first_while_paused()
        for effect in effects:
            if isinstance(effect, ev.Finish):
                return True, effect.error
            outcome = await self._execute(effect, tg, contender)
            if outcome is not None:
                outcomes.append(outcome)
                if isinstance(outcome, ev.DeadlineExpired):
                    break  # P17: the term never began; its report and writes are void
        return False, None

    def _next_input(self, inbox: Inbox[ev.Input], outcomes: list[ev.Input]) -> ev.Input | None:
        """Driver events first (they may make an outcome stale), then outcomes; None: wait
        for the next input or the backoff's timer."""
        event = inbox.get_nowait()
        if event is not None:
            return event
        if outcomes:
            outcome = outcomes.pop(0)
            if (
                isinstance(outcome, ev.Disconnected)
                and self.driver.connected
                and self.driver.session_id == outcome.session
            ):
                # the contact this failed call lost is back already (the driver's events came
                # first): tell the machine so, or it waits OFFLINE for a reconnection it missed
                outcomes.insert(0, ev.Reconnected(outcome.session))
            return outcome
        return None

    # --- effects ------------------------------------------------------------------------------

    async def _execute(
        self, effect: ev.Effect, tg: anyio.abc.TaskGroup, contender: object
    ) -> ev.Input | None:
        nodes, driver = self.nodes, self.driver
        match effect:
            case ev.Join(session, ticket):
                async with join_turns(driver):  # the wait is not the op's (admission.py)
                    return await self._op("join", session, self._join(effect))
            case ev.ListQueue(session, ticket, token):
                find = nodes.find(driver, session, ticket, token)
                return self._queued(await self._op("list queue", session, find))
            case ev.Watch(session, node, first):
                self._fenced = ()  # a takeover's fences follow a watch or a read of crumbs
                self._watches.below(node, first, self._machine.node)
                return await self._op("watch", session, nodes.watch(driver, session, node, first))
            case ev.ReadCrumbs(session, ticket, token):
                self._fenced = ()
                read = nodes.read_crumbs(driver, session, ticket, token)
                return await self._op("read breadcrumbs", session, read)
            case ev.FenceOldActive(session, breadcrumb):
                self._reporting.fencing()  # the journal dates the old active's end by it
                return await self._fence(contender, session, breadcrumb)
            case ev.StartActive(session, epoch, node):
                if not await self._contact_fresh(session):
                    return ev.DeadlineExpired(session)  # P17: no term on stale contact
                self._lease = self._leadership.start(tg, contender, session, epoch, node)
            case ev.ClearCrumbs(session, node, tickets):
                # after a takeover's fences, as for Announce: the new term's task reaches
                # become_active before this request is even built
                await self._leadership.begun()
                await self._quietly("clear breadcrumbs", nodes.clear(driver, node, tickets))
            case ev.Announce(session, node, write):
                # let the new term's task reach become_active first: the write is for the
                # contender behind us, the work need not wait for its round trip
                await self._leadership.begun()
                if write:
                    await self._quietly("announce", driver.set(nodes.node(node), self.identity))
                if self._term is not None:  # the history, after the takeover: no delay to it
                    record = append_term(driver, nodes, node, self._term, self._ended())
                    tg.start_soon(self._quietly, "record the term", record)
            case ev.DropCrumb(session, ticket):
                await self._quietly("drop a breadcrumb", nodes.drop_crumb(driver, ticket))
            case ev.StopActive(cause):
                await self._leadership.stop(cause)
            case ev.Resign(session, ticket):
                if driver.connected:
                    await self._leave(effect)
                else:
                    self._unresigned[ticket] = effect  # sent once contact is back (after the quit)
            case ev.Leave():
                return await self._leave(effect)
            case ev.NotifyStandby():
                await self._hook(contender, "become_standby")
            case ev.NotifyNeutral():
                await self._hook(contender, "enter_neutral")
            case ev.NotifyFatal(error):
                await self._hook(contender, "on_fatal_error", ElectionFailed(error))
            case ev.WaitBackoff(attempt, token, fencing):
                backoff = self.timing.fence_backoff if fencing else self.timing.backoff
                delay = backoff.delay(attempt, self._rng)
                self._backoff_at = (anyio.current_time() + delay, token)
                if fencing:
                    self._refused(attempt, delay, tg)
            case ev.Report():
                self._report(effect)
        return None

    async def _contact_fresh(self, session: int) -> bool:
        """P17: whether a term may start now: the local deadline, counted from the last
        contact in ``session``, has not passed. Contact gone stale (a stalled process woken to
        a win that its buffered events told it of) is waited for while the session may still
        live: a renewal in the same session proves our node, hence our place, is still there."""
        driver, inbox = self.driver, self._inbox
        span = self.timing.deadline_ratio * driver.session_timeout
        while anyio.current_time() >= driver.last_contact + span:
            gone = driver.session_id != session or self._closed or not driver.connected
            # an input waiting (a quit, an expiry, a watch) is handled first: a refused start
            # makes the machine list the queue, which wins again only on the answer
            waiting = inbox is not None and inbox.waiting() > 0
            if gone or waiting:
                log.warning(
                    "%s: first in the queue, but no contact with the backend for %.3fs: not"
                    " starting the active work",
                    self.path,
                    anyio.current_time() - driver.last_contact,
                )
                return False
            await anyio.sleep(min(0.01, span / 10))
        # fresh, but whose? A driver opens its next session as soon as one ends, with fresh
        # contact: a win in the session that ended is no win (its EXPIRED found no term to end)
        return driver.session_id == session and not self._closed

    async def _join(self, effect: ev.Join) -> ev.Input:
        crumb = Breadcrumb(self.identity, None, self.data)
        found = await self.nodes.enter(self.driver, effect.session, effect.ticket, crumb)
        return self._queued(found) or found

    def _queued(self, found: ev.Input | None) -> ev.Input | None:
        """Watch our own node as soon as we know it (its deletion ends our place)."""
        if isinstance(found, ev.Queued):
            self._watches.own(found.node)
        return found

    async def _op(
        self, name: str, session: int, call: Awaitable[ev.Input | None]
    ) -> ev.Input | None:
        timeout = self.timing.op_timeout or self.driver.session_timeout
        try:
            with anyio.fail_after(timeout):
                return await call
        except TimeoutError:
            return ev.OperationFailed(session, name, f"no answer in {timeout:g}s", True)
        except SessionExpired as exc:
            return ev.OperationFailed(session, name, str(exc), True)
        except (DriverError, CorruptData) as exc:
            transient = isinstance(exc, DriverError) and exc.transient
            if transient and not self.driver.connected:
                return ev.Disconnected(session)  # unreachable: wait for contact, do not count
            if not transient:
                log.error("%s: %s failed: %s", self.path, name, exc)
            return ev.OperationFailed(session, name, str(exc), transient)

    async def _quietly(self, name: str, call: Awaitable[object]) -> bool:
        """A best-effort call: bounded by the op timeout; a failure is logged, not raised."""
        try:
            with anyio.fail_after(self.timing.op_timeout or self.driver.session_timeout):
                await call
        except (DriverError, TimeoutError) as exc:
            log.info("%s: %s failed: %s", self.path, name, exc or "no answer")
            return False
        return True

    async def _leave(self, effect: ev.Leave | ev.Resign) -> ev.Left | None:
        """Leave the queue (``nodes.leave``); no answer when it failed: the machine keeps the
        node in its ``unleft`` and sends the Leave again (after a quit: the release). A
        Resign (``nodes.resign``) that failed is kept and sent again as one after the quit,
        never as a Leave that keeps the breadcrumb: the next leader would fence us for
        nothing (P13)."""
        if isinstance(effect, ev.Resign):
            name, call = "resign", self.nodes.resign(self.driver, effect.ticket, effect.node)
        else:
            name = "leave the queue"
            call = self.nodes.leave(
                self.driver, effect.ticket, effect.node, keep_crumb=effect.keep_crumb
            )
        if not await self._quietly(name, call):
            if isinstance(effect, ev.Resign):
                self._unresigned[effect.ticket] = effect
            return None
        if isinstance(effect, ev.Resign):
            self._unresigned.pop(effect.ticket, None)  # (its Left is never fed: done)
        return ev.Left(effect.session, effect.ticket)

    async def _quit_cancelled(self, contender: object) -> None:
        """The run was cancelled from outside: quit as the machine says for a quit that keeps
        our breadcrumb (the next active fences us), each effect run by ``_execute`` as in the
        loop and cut short after ``QUICK``: the queue is left quickly, best effort. A report
        comes from the state last published (``_report``): the cancellation may have cut an
        effect list short."""
        async with anyio.create_task_group() as tg:
            for effect in self._machine.handle(ev.QuitRequested(need_fence=True)):
                if isinstance(effect, ev.Finish):
                    break
                with anyio.move_on_after(QUICK):
                    await self._execute(effect, tg, contender)

    async def _release_after_quit(self, unfed: list[ev.Input]) -> None:
        """After a quit, keep trying to leave the queue while our session may live.

        A quit while disconnected or while the backend is busy must not leave our node in the
        queue of a session that lives on (``ha run --health`` keeps its session while it stays
        out): if it were first, nobody else could lead. Done once the node is gone, or our
        session is over: a new session, or the driver closed. After two session timeouts of
        failing tries, or no contact for a whole one, the run returns and the driver's task
        goes on trying (``departures.py``): the session may still come back.
        """
        session = self._machine.session
        if session is None:
            return
        # what the machine still owed when it finished (but what its last effects left), and
        # a resign that failed
        left = {o.ticket for o in unfed if isinstance(o, ev.Left)}
        owed: dict[str, ev.Leave | ev.Resign] = {
            ticket: ev.Leave(session, ticket, node, keep_crumb)
            for ticket, (node, keep_crumb) in self._machine.unleft.items()
            if ticket not in left
        }
        owed |= {t: e for t, e in self._unresigned.items() if e.session == session}
        timeout = self.driver.session_timeout
        give_up = anyio.current_time() + 2 * timeout
        delay = 0.05
        while owed:
            if self.driver.session_id != session or self._closed:
                return
            now = anyio.current_time()
            if now > give_up or (
                not self.driver.connected and now > self.driver.last_contact + timeout
            ):
                # the backend may have expired the session by now, not must: a backend that
                # was down resumes its sessions, and our node would stand first for good
                self._owe(session, owed)
                return
            if self.driver.connected:
                for ticket, effect in list(owed.items()):
                    if await self._leave(effect) is not None:
                        del owed[ticket]
                if not owed:
                    return
            log.info("%s: quit: our node may still be in the queue; trying again", self.path)
            await anyio.sleep(delay)
            delay = min(delay * 2, timeout / 3)

    def _owe(self, session: int, owed: dict[str, ev.Leave | ev.Resign]) -> None:
        """Hand what we could not leave to the driver's task (``departures.py``): it tries
        again whenever this session is connected, after our run has returned."""
        log.warning(
            "%s: quit, but our node may still be in the queue; leaving it once the backend"
            " answers (or the session ends)",
            self.path,
        )
        departures = departures_of(self.driver)
        for ticket, effect in owed.items():

            async def leave(effect: ev.Leave | ev.Resign = effect) -> bool:
                return await self._leave(effect) is not None

            departures.owe((self.path, ticket), session, self.path, leave)

    # --- the contender ------------------------------------------------------------------------

    async def _hook(self, contender: object, name: str, *args: Any) -> None:
        await call_hook(contender, name, self.timing.hook_timeout, self.path, *args)

    async def _fence(self, contender: object, session: int, breadcrumb: bytes) -> ev.Input:
        timeout = self.timing.fence_timeout
        error, ran = await fence_old_active(contender, breadcrumb, timeout, self.path)
        crumb = decode_breadcrumb(breadcrumb)
        old = crumb.identity.decode(errors="replace") if crumb else "an unreadable breadcrumb"
        if error is None:
            self._fencing = self._refusal = None
            self._fenced += (f"fenced {old!r}" if ran else f"took over from {old!r}",)
            return ev.FenceSucceeded(session)
        self._refusal = (old, error)  # counted by the machine, shown with its backoff
        return ev.FenceFailed(session, error)

    def _refused(self, count: int, delay: float, tg: anyio.abc.TaskGroup) -> None:
        """The machine counted a refused fence (``count`` in a row) and backs off ``delay``:
        say it in the log, the statistics (``ha status``'s member note, the metrics) and the
        election's history, all with the same count."""
        old, error = self._refusal or ("an unknown old active", "refused")
        self._fencing = (old, count, error)
        log.warning(
            "%s: fencing %r refused (%d in a row): %s; next try in %.3gs",
            self.path,
            old,
            count,
            error,
            delay,
        )
        failure = FenceFailure(self.identity, old, error, time.time(), count)
        refused = record_fence_failure(self.driver, self.nodes, failure)
        tg.start_soon(self._quietly, "record the refused fence", refused)

    def _first_while_paused(self) -> None:
        """P16 holds us back: say so on this host, whose public state does not change (P15),
        as the election has no active until someone resumes it."""
        gone = "the active we stood by for is gone, and " if self._state is State.STANDBY else ""
        log.warning(
            "%s: first in the queue while the election is paused: %snobody leads until"
            " `ha resume %s` (then we take the lead)",
            self.path,
            gone,
            self.path,
            extra={"election": self.path, "identity": self.identity.decode(errors="replace")},
        )

    def _ended(self) -> str:
        """How the terms before ours ended, as this takeover found them: a leader that left a
        breadcrumb (fenced on the way) lost its session; one that left none resigned."""
        me = self.identity.decode(errors="replace")
        if not self._fenced:
            return f"resigned: {me} took over"
        ran = any(step.startswith("fenced") for step in self._fenced)  # else: no fence hook
        return f"lost its session: {me} took over" + (" and fenced it" if ran else "")

    # --- reporting ----------------------------------------------------------------------------

    def _report(self, report: ev.Report) -> None:
        if report.old is not self._state:
            # a term refused for stale contact (P17) was never reported: say what was
            if report.new is self._state:
                return
            report = ev.Report(self._state, report.new, report.epoch, report.cause)
        self._state = report.new
        if report.new in (State.ACTIVE, State.STANDBY):
            self._fencing = None  # someone leads: our refused fences are history
        # a term stopped by its local deadline, which passed before it could be reported
        left = report.old is State.ACTIVE and report.new is not State.ACTIVE
        until = self._leadership.expired if left else None
        if report.new is not State.ACTIVE:
            self._lease = None
        elif report.epoch is not None:
            fenced = f" ({', '.join(self._fenced)})" if self._fenced else ""
            self._term = Term(report.epoch, self.identity, time.time(), report.cause + fenced)
        self._reporting.send(report, until=until)
