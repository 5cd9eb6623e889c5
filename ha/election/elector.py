"""The elector runner: the one place that awaits. It asks the machine what to do and does it.

One task runs the loop: it takes an input (driver events first, then the outcome of the last
effect, then timers), hands it to ``Machine.handle`` and executes the effects in order. The
contender's ``become_active`` runs in a second task, in a cancel scope that ``StopActive``
cancels and then awaits, so nobody is told of any other state while the work may still run.

Timing assumption (see ``ha/drivers/base.py``): the backend expires a session no earlier than
``session_timeout`` after the last contact. The leadership scope has a watchdog of its own that
cancels it at ``driver.last_contact + deadline_ratio * session_timeout`` unless contact was made
since, so the work stops before the lock can pass on even if the loop is stuck in a slow call.
"""

from __future__ import annotations

import logging
import math
import random
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.abc
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from .._clock import monotonic_minus_loop
from ..drivers.base import (
    Check,
    ConnectionEvent,
    ConnectionState,
    Create,
    Delete,
    Driver,
    NodeEvent,
    NodeEventKind,
    Op,
    SetData,
    Stat,
    validate_path,
)
from ..errors import (
    BadVersion,
    ConfigurationError,
    CorruptData,
    DriverError,
    ElectionFailed,
    NodeExists,
    NoNode,
    SessionExpired,
    TransactionFailed,
)
from . import machine as m
from .contender import check_contender
from .journal import JournalWriter, Transition
from .lease import Lease
from .machine import State

__all__ = ("Backoff", "Elector", "Timing")

log = logging.getLogger("ha.elector")
_SHARED_RNG = random.Random()


@dataclass(frozen=True, slots=True)
class Backoff:
    """Delay before rejoining after the n-th consecutive failure: exponential, capped, jittered."""

    initial: float = 0.05
    maximum: float = 2.0
    multiplier: float = 2.0
    jitter: float = 0.5  # the delay is drawn from [d * (1 - jitter), d]

    def __post_init__(self) -> None:
        if not 0 < self.initial <= self.maximum:
            raise ConfigurationError("backoff needs 0 < initial <= maximum")
        if self.multiplier < 1 or not 0 <= self.jitter < 1:
            raise ConfigurationError("backoff needs multiplier >= 1 and 0 <= jitter < 1")

    def delay(self, attempt: int, rng: random.Random) -> float:
        base = min(self.maximum, self.initial * self.multiplier ** max(0, attempt - 1))
        return base * (1 - self.jitter * rng.random())


@dataclass(frozen=True, slots=True)
class Timing:
    """The elector's timing, checked at construction (as client-go's LeaderElectionConfig).

    ``deadline_ratio``: the leadership scope is stopped this fraction of the session timeout
    after the last contact (must leave the stop time before the backend can expire us).
    ``hook_timeout``: bound on ``become_standby``, ``enter_neutral``, ``on_fatal_error``.
    ``fence_timeout``: bound on ``fence_old_active``. ``op_timeout``: bound on one backend call
    (default: the session timeout).
    """

    deadline_ratio: float = 2 / 3
    hook_timeout: float = 5.0
    fence_timeout: float = 30.0
    op_timeout: float | None = None
    backoff: Backoff = Backoff()
    max_retries: int = 5
    hold_on_disconnect: bool = False

    def __post_init__(self) -> None:
        if not 0 < self.deadline_ratio < 1:
            raise ConfigurationError(
                f"deadline_ratio must be in (0, 1) so the active stops before its session "
                f"can expire; got {self.deadline_ratio}"
            )
        if self.hook_timeout <= 0 or self.fence_timeout <= 0:
            raise ConfigurationError("hook_timeout and fence_timeout must be positive")
        if self.op_timeout is not None and self.op_timeout <= 0:
            raise ConfigurationError("op_timeout must be positive")
        if self.max_retries < 0:
            raise ConfigurationError("max_retries must be >= 0")


def _identity_bytes(identity: bytes | str) -> bytes:
    if isinstance(identity, str):
        identity = identity.encode()
    if not isinstance(identity, bytes | bytearray) or not identity:
        raise ConfigurationError("identity must be non-empty bytes or str (e.g. b'host-a:7077')")
    return bytes(identity)


class Elector:
    """Takes part in the election at ``path`` on ``driver`` as ``identity``.

    ``await elector.run(contender)`` returns when the election is quit (``quit()``); it raises
    ``ElectionFailed`` after a fatal error. Also ``await task_group.start(elector.run, c)``.
    The nodes used: ``{path}/lock`` (ephemeral, holds the identity), ``{path}/breadcrumb``
    and ``{path}/epoch`` (persistent).
    """

    __slots__ = (
        "driver",
        "path",
        "identity",
        "data",
        "timing",
        "lock_path",
        "breadcrumb_path",
        "epoch_path",
        "_journal_spec",
        "_journal",
        "_rng",
        "_machine",
        "_state",
        "_lease",
        "_send",
        "_watchers",
        "_listeners",
        "_lead_scope",
        "_lead_done",
        "_backoff_at",
        "_closed",
        "_quit_pending",
        "_fencing",
        "_may_hold",
        "counts",
    )

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
    ) -> None:
        if not isinstance(driver, Driver):
            raise ConfigurationError(f"driver must be an ha driver, got {type(driver).__name__}")
        validate_path(path)
        if path == "/":
            raise ConfigurationError("the election path must not be the root '/'")
        self.driver = driver
        self.path = path
        self.identity = _identity_bytes(identity)
        self.data = bytes(data)
        self.timing = timing or Timing()
        self.lock_path = f"{path}/lock"
        self.breadcrumb_path = f"{path}/breadcrumb"
        self.epoch_path = f"{path}/epoch"
        # a path is opened for each run and closed after it; a writer given is the caller's
        self._journal_spec = journal
        self._journal: JournalWriter | None = None
        # one generator for all electors unless seeded: a Random costs ~2.5 KB per elector
        self._rng = _SHARED_RNG if seed is None else random.Random(seed)
        self._machine = m.Machine(
            self.identity,
            max_retries=self.timing.max_retries,
            hold_on_disconnect=self.timing.hold_on_disconnect,
        )
        self._state = State.NEUTRAL
        self._lease: Lease | None = None
        self._send: MemoryObjectSendStream[m.Input] | None = None
        self._watchers: list[MemoryObjectSendStream[Transition]] = []
        self._listeners: list[Callable[[Transition], None]] = []
        self._lead_scope: anyio.CancelScope | None = None
        self._lead_done: anyio.Event | None = None
        self._backoff_at: tuple[float, int] | None = None
        self._closed = False
        self._quit_pending: m.QuitRequested | None = None
        # the last refused fence: (old active's identity, error); None after success
        self._fencing: tuple[str, str] | None = None
        # the session that may hold our lock: set before every create, cleared once a release
        # finds the lock not (or no longer) ours
        self._may_hold: int | None = None
        self.counts: Counter[tuple[str, str]] = Counter()

    # --- public -------------------------------------------------------------------------------

    @property
    def state(self) -> State:
        """The public state as last reported (ACTIVE only while the leadership scope may run)."""
        return self._state

    @property
    def lease(self) -> Lease | None:
        """The current lease while ACTIVE."""
        return self._lease if self._state is State.ACTIVE else None

    def quit(self, need_fence: bool = False) -> None:
        """Leave the election; ``run`` returns once done. ``need_fence=False`` from ACTIVE
        deletes our breadcrumb so the next active does not fence us."""
        self._feed(m.QuitRequested(need_fence))

    def statistics(self) -> dict[str, Any]:
        stats: dict[str, Any] = {
            "state": self._state.value,
            "epoch": self._lease.epoch if self._lease else None,
            "transitions": {f"{a}->{b}": n for (a, b), n in sorted(self.counts.items())},
        }
        if self._fencing is not None:
            old, error = self._fencing
            count = self._machine.fence_failures
            retry = None
            if self._backoff_at is not None:
                retry = max(0.0, self._backoff_at[0] - anyio.current_time())
            stats["fencing"] = {
                "old": old,
                "failures": count,
                "error": error,
                "next_try_in": retry,
            }
        return stats

    def fencing_note(self) -> str | None:
        """ "fencing 'x' failed 5 times, next try in 8s" while fences keep being refused."""
        fencing = self.statistics().get("fencing")
        if fencing is None:
            return None
        note = f"fencing {fencing['old']!r} failed {fencing['failures']} times"
        if fencing["next_try_in"] is not None:
            note += f", next try in {fencing['next_try_in']:.0f}s"
        return f"{note} ({fencing['error']})"

    def add_listener(self, callback: Callable[[Transition], None]) -> None:
        """Call ``callback(transition)`` synchronously on every transition (must not block)."""
        self._listeners.append(callback)

    @asynccontextmanager
    async def transitions(self) -> AsyncIterator[MemoryObjectReceiveStream[Transition]]:
        """A stream of every transition from now on: ``async for t in stream``."""
        send, receive = anyio.create_memory_object_stream[Transition](math.inf)
        self._watchers.append(send)
        try:
            with receive:
                yield receive
        finally:
            self._watchers.remove(send)
            send.close()

    async def run(
        self,
        contender: object,
        *,
        task_status: anyio.abc.TaskStatus[Elector] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        check_contender(contender)
        if self._send is not None:
            raise RuntimeError("this elector is already running")
        if self._machine.phase in (m.Phase.DONE, m.Phase.FAILED):
            raise RuntimeError("this elector has finished; make a new Elector to rejoin")
        send, receive = anyio.create_memory_object_stream[m.Input](math.inf)
        self._send = send
        error: str | None = None
        spec = self._journal_spec
        self._journal = JournalWriter(spec) if isinstance(spec, str) else spec
        subs = [
            self.driver.subscribe(None, self._on_connection),
            self.driver.subscribe(self.lock_path, self._on_lock),
            self.driver.subscribe(self.epoch_path, self._on_epoch),
        ]
        try:
            with send, receive:
                async with anyio.create_task_group() as tg:
                    sid = self.driver.session_id
                    if sid is not None:  # catch up with the driver's state before joining
                        self._feed(m.Connected(sid))
                        if not self.driver.connected:
                            self._feed(m.Disconnected(sid))
                    self._feed(m.Joined())
                    if self._quit_pending is not None:
                        self._feed(self._quit_pending)
                    task_status.started(self)
                    error = await self._loop(tg, contender, receive)
                    if error is None:
                        await self._release_after_quit()
                    tg.cancel_scope.cancel()
        finally:
            for sub in subs:
                sub.close()
            with anyio.CancelScope(shield=True):
                await self._stop_active("elector stopped")
                if self._machine.phase not in (m.Phase.DONE, m.Phase.FAILED):
                    # cancelled from outside: leave as a quit that keeps our breadcrumb (the
                    # next active fences us), releasing what we hold quickly, best effort
                    for effect in self._machine.handle(m.QuitRequested(need_fence=True)):
                        if isinstance(effect, m.ReleaseLock):
                            with anyio.move_on_after(1.0):
                                await self._release_lock(effect.session)
                        elif isinstance(effect, m.Report) and effect.new is not self._state:
                            # the cancellation may have cut an effect list short, so report
                            # from the state last published, not the machine's
                            self._report(m.Report(self._state, effect.new, None, effect.cause))
            self._send = None
            if isinstance(spec, str) and self._journal is not None:
                self._journal.close()
        if error is not None:  # raised outside the task group: a plain exception, not a group
            raise ElectionFailed(f"election {self.path} as {self.identity!r} failed: {error}")

    # --- event intake -------------------------------------------------------------------------

    def _feed(self, event: m.Input) -> None:
        if self._send is None:
            if isinstance(event, m.QuitRequested):
                self._quit_pending = event  # quit before run: run() leaves at once
            return
        try:
            self._send.send_nowait(event)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass  # the run is ending

    def _on_connection(self, event: ConnectionEvent) -> None:
        sid = event.session_id
        if event.state is ConnectionState.CLOSED:
            self._closed = True
            if self._machine.session is not None:
                self._feed(
                    m.OperationFailed(self._machine.session, "driver", "driver closed", False)
                )
            return
        if sid is None:
            return
        mapping: dict[ConnectionState, Callable[[int], m.Input]] = {
            ConnectionState.CONNECTED: m.Connected,
            ConnectionState.DISCONNECTED: m.Disconnected,
            ConnectionState.RECONNECTED: m.Reconnected,
            ConnectionState.EXPIRED: m.SessionExpired,
        }
        self._feed(mapping[event.state](sid))

    def _on_lock(self, event: NodeEvent) -> None:
        sid = self._machine.session
        if sid is None:
            return
        if event.kind is NodeEventKind.DELETED:
            self._feed(m.LockDeleted(sid))
        elif event.kind is NodeEventKind.CHANGED:
            self._feed(m.LockChanged(sid))

    def _on_epoch(self, event: NodeEvent) -> None:
        sid = self._machine.session
        if sid is not None and event.kind is not NodeEventKind.CREATED:
            self._feed(m.EpochChanged(sid))

    # --- the loop -----------------------------------------------------------------------------

    async def _loop(
        self,
        tg: anyio.abc.TaskGroup,
        contender: object,
        receive: MemoryObjectReceiveStream[m.Input],
    ) -> str | None:
        """Run until the machine finishes; return its fatal error, if any."""
        outcomes: list[m.Input] = []  # rarely more than one; a deque costs 600 B each
        while True:
            event = await self._next_input(receive, outcomes)
            if isinstance(event, m.BackoffElapsed):
                self._backoff_at = None
            for effect in self._machine.handle(event):
                if isinstance(effect, m.Finish):
                    return effect.error
                outcome = await self._execute(effect, tg, contender)
                if outcome is not None:
                    outcomes.append(outcome)

    async def _next_input(
        self, receive: MemoryObjectReceiveStream[m.Input], outcomes: list[m.Input]
    ) -> m.Input:
        """Driver events first (they may make an outcome stale), then outcomes, then timers."""
        try:
            return receive.receive_nowait()
        except anyio.WouldBlock:
            pass
        if outcomes:
            outcome = outcomes.pop(0)
            if (
                isinstance(outcome, m.Disconnected)
                and self.driver.connected
                and self.driver.session_id == outcome.session
            ):
                # the contact this failed call lost is back already (the driver's events came
                # first): tell the machine so, or it waits OFFLINE for a reconnection it missed
                outcomes.insert(0, m.Reconnected(outcome.session))
            return outcome
        if self._backoff_at is None:
            return await receive.receive()
        when, token = self._backoff_at
        with anyio.move_on_after(when - anyio.current_time()):
            return await receive.receive()
        return m.BackoffElapsed(token)

    # --- effects ------------------------------------------------------------------------------

    async def _execute(
        self, effect: m.Effect, tg: anyio.abc.TaskGroup, contender: object
    ) -> m.Input | None:
        match effect:
            case m.CreateLock(session):
                return await self._op("create lock", session, self._create_lock(session))
            case m.ReadLock(session):
                return await self._op("read lock", session, self._read_lock(session))
            case m.ReadElection(session):
                return await self._op("read election", session, self._read_election(session))
            case m.FenceOldActive(session, breadcrumb):
                return await self._fence(contender, session, breadcrumb)
            case m.CommitActive():
                return await self._op("commit epoch", effect.session, self._commit(effect))
            case m.ClaimActive():
                return await self._op("claim", effect.session, self._claim(effect))
            case m.StartActive(session, epoch, epoch_version):
                await self._start_active(tg, contender, session, epoch, epoch_version)
            case m.StopActive(cause):
                await self._stop_active(cause)
            case m.VerifyEpoch(session, epoch, epoch_version):
                return await self._op(
                    "verify epoch", session, self._verify_epoch(session, epoch, epoch_version)
                )
            case m.ReleaseLock(session):
                await self._release_lock(session)
            case m.DeleteBreadcrumb(session, version, lock_version):
                await self._resign(version, lock_version)
            case m.NotifyStandby():
                await self._hook(contender, "become_standby")
            case m.NotifyNeutral():
                await self._hook(contender, "enter_neutral")
            case m.NotifyFatal(error):
                await self._hook(contender, "on_fatal_error", ElectionFailed(error))
            case m.Backoff(attempt, token):
                delay = self.timing.backoff.delay(attempt, self._rng)
                self._backoff_at = (anyio.current_time() + delay, token)
            case m.Report():
                self._report(effect)
        return None

    async def _op(self, name: str, session: int, call: Awaitable[m.Input | None]) -> m.Input | None:
        timeout = self.timing.op_timeout or self.driver.session_timeout
        try:
            with anyio.fail_after(timeout):
                return await call
        except TimeoutError:
            return m.OperationFailed(session, name, f"no answer in {timeout:g}s", True)
        except SessionExpired as exc:
            return m.OperationFailed(session, name, str(exc), True)
        except (DriverError, CorruptData) as exc:
            transient = isinstance(exc, DriverError) and exc.transient
            if transient and not self.driver.connected:
                return m.Disconnected(session)  # unreachable: wait for contact, do not count
            if not transient:
                log.error("%s: %s failed: %s", self.path, name, exc)
            return m.OperationFailed(session, name, str(exc), transient)

    async def _create_lock(self, session: int) -> m.Input:
        self._may_hold = session
        try:
            await self.driver.create(self.lock_path, self.identity, ephemeral=True, makepath=True)
        except NodeExists:
            return m.LockExists(session)
        return m.LockCreated(session, 0)

    async def _read_lock(self, session: int) -> m.Input:
        try:
            holder, stat = await self.driver.get(self.lock_path)
        except NoNode:
            return m.LockMissing(session)
        # several electors may share one session (one per election or not): the lock is ours
        # only if our session created it AND it names us (identities are unique per election)
        ours = stat.ephemeral_owner == session and holder == self.identity
        return m.LockOwned(session, ours, holder, stat.version)

    async def _read_election(self, session: int) -> m.Input:
        crumb: tuple[bytes | None, int | None] = (None, None)
        epoch: tuple[int, int | None] = (0, None)
        errors: list[Exception] = []

        # the children never raise: an error beside a cancellation (the op's timeout) would
        # leave the task group as a BaseExceptionGroup that nothing above can handle (trio)
        async def read_crumb() -> None:
            nonlocal crumb
            try:
                raw, stat = await self.driver.get(self.breadcrumb_path)
                crumb = (raw, stat.version)
            except NoNode:
                pass
            except Exception as exc:
                errors.append(exc)

        async def read_epoch() -> None:
            nonlocal epoch
            try:
                epoch = await self._read_epoch()
            except Exception as exc:
                errors.append(exc)

        # both reads in flight at once: one round trip instead of two on the way to ACTIVE
        async with anyio.create_task_group() as tg:
            tg.start_soon(read_crumb)
            tg.start_soon(read_epoch)
        if errors:
            raise errors[0]
        return m.ElectionRead(session, crumb[0], crumb[1], epoch[0], epoch[1])

    async def _read_epoch(self) -> tuple[int, int | None]:
        try:
            raw, stat = await self.driver.get(self.epoch_path)
        except NoNode:
            return 0, None
        try:
            value = int(raw.decode("ascii"))
        except (UnicodeDecodeError, ValueError):
            raise CorruptData(
                self.epoch_path, f"epoch is not a decimal number: {raw[:40]!r}"
            ) from None
        if value < 0:
            raise CorruptData(self.epoch_path, f"epoch is negative: {value}")
        return value, stat.version

    async def _commit(self, effect: m.CommitActive) -> m.Input:
        ops: list[Op] = [Check(self.lock_path, effect.lock_version)]
        ops += self._epoch_and_crumb_ops(
            effect.epoch, effect.epoch_version, effect.breadcrumb_version
        )
        try:
            results = await self.driver.transaction(ops)
        except TransactionFailed as exc:
            return m.CommitConflict(effect.session, lock_lost=exc.index == 0)
        return m.Committed(effect.session, effect.epoch, _version(results[1]), _version(results[2]))

    def _epoch_and_crumb_ops(
        self, epoch: int, epoch_version: int | None, crumb_version: int | None
    ) -> list[Op]:
        """Bump the epoch by compare-and-set and write our breadcrumb naming it."""
        crumb = m.encode_breadcrumb(m.Breadcrumb(self.identity, epoch, self.data))
        epoch_bytes = str(epoch).encode()
        return [
            Create(self.epoch_path, epoch_bytes)
            if epoch_version is None
            else SetData(self.epoch_path, epoch_bytes, epoch_version),
            Create(self.breadcrumb_path, crumb)
            if crumb_version is None
            else SetData(self.breadcrumb_path, crumb, crumb_version),
        ]

    async def _claim(self, effect: m.ClaimActive) -> m.Input:
        self._may_hold = effect.session
        ops: list[Op] = [Create(self.lock_path, self.identity, ephemeral=True)]
        ops += self._epoch_and_crumb_ops(
            effect.epoch, effect.epoch_version, effect.breadcrumb_version
        )
        try:
            results = await self.driver.transaction(ops)
        except TransactionFailed as exc:
            return m.ClaimConflict(effect.session, lock_exists=exc.index == 0)
        return m.Claimed(effect.session, effect.epoch, _version(results[1]), _version(results[2]))

    async def _verify_epoch(self, session: int, epoch: int, epoch_version: int) -> m.Input | None:
        try:
            _, stat = await self.driver.get(self.epoch_path)
        except NoNode:
            return m.EpochSuperseded(session, epoch)
        return None if stat.version == epoch_version else m.EpochSuperseded(session, epoch)

    async def _release_lock(self, session: int | None) -> None:
        """Delete the lock if our session owns it. Best effort: errors are logged.

        ZooKeeper cannot check the owner inside a transaction, so this reads then deletes by
        version; the lock can only change hands in between if it was deleted by a third party.
        Once the lock is known not to be ours, ``_may_hold`` is cleared.
        """
        if session is None:
            return
        try:
            with anyio.fail_after(self.timing.op_timeout or self.driver.session_timeout):
                holder, stat = await self.driver.get(self.lock_path)
                if stat.ephemeral_owner == session and holder == self.identity:
                    await self.driver.delete(self.lock_path, stat.version)
        except (NoNode, BadVersion):
            pass
        except TimeoutError:
            return
        except DriverError as exc:
            log.info("%s: releasing the lock failed: %s", self.path, exc)
            return
        if self._may_hold == session:
            self._may_hold = None

    async def _release_after_quit(self) -> None:
        """After a quit, keep trying the owner-checked release while our session may live.

        A quit while disconnected or while the backend is busy must not leave the lock held
        by a session that lives on (``ha run --health`` keeps its session while it stays out):
        nobody else could lead. Done once the lock is not ours, or our session is over: a new
        session, the driver closed, or no contact for a whole session timeout. Bounded by two
        session timeouts of failing releases, then said loudly (closing the driver ends it).
        """
        session = self._machine.session
        if session is None or self._may_hold != session:
            return
        timeout = self.driver.session_timeout
        give_up = anyio.current_time() + 2 * timeout
        delay = 0.05
        while self._may_hold == session:
            if self.driver.session_id != session or self._closed:
                return
            now = anyio.current_time()
            if not self.driver.connected and now > self.driver.last_contact + timeout:
                return  # the backend has expired it (timing assumption, drivers/base.py)
            if now > give_up:
                log.error(
                    "%s: quit, but the lock may still be held by this session: close the"
                    " driver to release it",
                    self.path,
                )
                return
            if self.driver.connected:
                await self._release_lock(session)
                if self._may_hold != session:
                    return
            log.info("%s: quit: the lock may still be ours; trying again", self.path)
            await anyio.sleep(delay)
            delay = min(delay * 2, timeout / 3)

    async def _resign(self, version: int, lock_version: int) -> None:
        """Delete our breadcrumb and our lock in one transaction (one write for a handover).

        If that fails (the lock is not as we left it), the breadcrumb alone is deleted by its
        version; the ReleaseLock that follows releases the lock if it is still ours.
        """
        try:
            with anyio.fail_after(self.timing.op_timeout or self.driver.session_timeout):
                try:
                    await self.driver.transaction(
                        [
                            Delete(self.breadcrumb_path, version),
                            Delete(self.lock_path, lock_version),
                        ]
                    )
                except TransactionFailed as exc:
                    if exc.index == 0:
                        raise exc.cause from None
                    await self.driver.delete(self.breadcrumb_path, version)
        except (DriverError, TimeoutError) as exc:
            # not ours any more, or unreachable: the next active will fence us, which is safe
            log.info("%s: breadcrumb not deleted: %s", self.path, exc)

    # --- the contender ------------------------------------------------------------------------

    async def _hook(self, contender: object, name: str, *args: Any) -> None:
        hook = getattr(contender, name, None)
        if hook is None:
            return
        try:
            with anyio.fail_after(self.timing.hook_timeout):
                await hook(*args)
        except TimeoutError:
            log.error("%s: contender hook %s did not finish in time", self.path, name)
        except Exception:
            log.exception("%s: contender hook %s raised", self.path, name)

    async def _fence(self, contender: object, session: int, breadcrumb: bytes) -> m.Input:
        hook = getattr(contender, "fence_old_active", None)
        if hook is None:
            log.info("%s: no fence_old_active hook; relying on epoch fencing", self.path)
            return m.FenceSucceeded(session)
        error = None
        try:
            with anyio.fail_after(self.timing.fence_timeout):
                await hook(breadcrumb)
        except TimeoutError:
            error = f"fence_old_active took over {self.timing.fence_timeout:g}s"
        except Exception as exc:
            error = repr(exc)
        if error is None:
            self._fencing = None
            return m.FenceSucceeded(session)
        crumb = m.decode_breadcrumb(breadcrumb)
        old = crumb.identity.decode(errors="replace") if crumb else "an unreadable breadcrumb"
        self._fencing = (old, error)
        count = self._machine.fence_failures + 1  # the machine counts it on FenceFailed
        log.warning("%s: fencing %r refused (%d in a row): %s", self.path, old, count, error)
        return m.FenceFailed(session, error)

    async def _start_active(
        self,
        tg: anyio.abc.TaskGroup,
        contender: object,
        session: int,
        epoch: int,
        epoch_version: int,
    ) -> None:
        scope = anyio.CancelScope()
        done = anyio.Event()
        self._lead_scope, self._lead_done = scope, done

        # the lease is asked from any thread: its deadline is on time.monotonic()
        to_monotonic = monotonic_minus_loop()
        span = self.timing.deadline_ratio * self.driver.session_timeout
        driver = self.driver

        def deadline() -> float:
            return driver.last_contact + span + to_monotonic

        def valid() -> bool:
            return not scope.cancel_called and self._machine.epoch == epoch

        def fenced() -> None:
            if valid():
                self._feed(m.EpochSuperseded(session, epoch))

        self._lease = Lease(
            self.path,
            self.identity,
            epoch,
            session,
            self.epoch_path,
            epoch_version,
            valid,
            fenced,
            deadline,
        )
        tg.start_soon(self._lead, contender, self._lease, scope, done)

    async def _lead(
        self, contender: Any, lease: Lease, scope: anyio.CancelScope, done: anyio.Event
    ) -> None:
        try:
            with scope:
                async with anyio.create_task_group() as inner:
                    inner.start_soon(self._watchdog, lease, scope)
                    try:
                        await contender.become_active(lease)
                    except BaseException as exc:
                        # a contender's own task group may raise a group mixing our
                        # cancellation with its errors: report the errors, re-raise the rest
                        cancelled, failed = _split_cancelled(exc)
                        if failed is not None:
                            log.error("%s: become_active raised", self.path, exc_info=failed)
                            self._feed(m.ActiveFailed(lease.session_id, lease.epoch, repr(failed)))
                            inner.cancel_scope.cancel()
                        if cancelled is not None:
                            raise cancelled from None
                        return
                    await anyio.sleep_forever()  # returned: keep leading until told to stop
        finally:
            done.set()

    async def _watchdog(self, lease: Lease, scope: anyio.CancelScope) -> None:
        """Stop the work on the local deadline counted from the last contact (property 3)."""
        span = self.timing.deadline_ratio * self.driver.session_timeout
        while True:
            deadline = self.driver.last_contact + span
            now = anyio.current_time()
            if now >= deadline:
                log.warning(
                    "%s: no contact with the backend for %.3fs: stopping the active work",
                    self.path,
                    now - self.driver.last_contact,
                )
                scope.cancel()
                self._feed(m.DeadlineExpired(lease.session_id))
                return
            await anyio.sleep(deadline - now)

    async def _stop_active(self, cause: str) -> None:
        scope, done = self._lead_scope, self._lead_done
        if scope is None or done is None:
            return
        scope.cancel()
        while not done.is_set():
            with anyio.move_on_after(self.timing.hook_timeout):
                await done.wait()
            if not done.is_set():
                log.error("%s: the active work ignores cancellation; still waiting", self.path)
        self._lead_scope = self._lead_done = None
        log.debug("%s: active work stopped (%s)", self.path, cause)

    # --- reporting ----------------------------------------------------------------------------

    def _report(self, report: m.Report) -> None:
        self._state = report.new
        if report.new in (State.ACTIVE, State.STANDBY):
            self._fencing = None  # someone leads: our refused fences are history
        if report.new is not State.ACTIVE:
            self._lease = None
        ident = self.identity.decode(errors="replace")
        transition = Transition(
            time.time(),
            anyio.current_time(),
            self.path,
            ident,
            report.old,
            report.new,
            report.epoch,
            report.cause,
        )
        self.counts[(report.old.value, report.new.value)] += 1
        log.info(
            "%s %s: %s -> %s (%s)",
            self.path,
            ident,
            report.old.value,
            report.new.value,
            report.cause,
            extra={
                "election": self.path,
                "identity": ident,
                "from_state": report.old.value,
                "to_state": report.new.value,
                "epoch": report.epoch,
                "cause": report.cause,
            },
        )
        if self._journal is not None:
            self._journal.write(transition)
        for listener in self._listeners:
            try:
                listener(transition)
            except Exception:
                log.exception("%s: transition listener raised", self.path)
        for watcher in list(self._watchers):
            try:
                watcher.send_nowait(transition)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                self._watchers.remove(watcher)


def _split_cancelled(
    exc: BaseException,
) -> tuple[BaseException | None, Exception | None]:
    """Split what ``become_active`` raised into (cancellation to re-raise, failure to report).

    Anything that is neither cancellation nor an ``Exception`` (KeyboardInterrupt, SystemExit)
    is returned as "cancellation" so that it propagates.
    """
    cancelled_class = anyio.get_cancelled_exc_class()
    if isinstance(exc, BaseExceptionGroup):
        cancelled, rest = exc.split(cancelled_class)
        if rest is not None and not isinstance(rest, Exception):
            return exc, None  # a non-Exception inside: let it all propagate
        return cancelled, rest
    if isinstance(exc, Exception):
        return None, exc
    return exc, None


def _version(result: str | Stat | None) -> int:
    return result.version if isinstance(result, Stat) else 0
