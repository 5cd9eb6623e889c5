"""The election's nodes: where they live, how they are encoded, and the calls each effect needs.

An election at ``PATH`` is these nodes (``ha/admin/`` reads them all from outside)::

    PATH/lock          ephemeral, the holder's identity: whoever holds it may become active
    PATH/breadcrumb    persistent, ``ha.breadcrumb/1`` JSON: the last active's identity, epoch
                       and data, left for the next active to fence
    PATH/epoch         persistent, a decimal counter: the fencing token; its node version is
                       what ``Lease.fence_ops()`` checks
    PATH/members/ID    ephemeral, one per ``ha run`` supervisor (``ha/admin/members.py``)
    PATH/failover      the last graceful failover request (``ha/admin/failover.py``)

All knowledge of these paths and encodings sits in this file, as etcd's ``election.go`` holds
its keys: the elector, ``ha status``, ``ha run`` and the demo go through ``ElectionNodes`` and
the codecs below. The calls the machine's effects need are here too, each answered as the
machine's input (``events.py``), so the runner only picks the call and bounds it in time.

Every write that makes an active carries its own guard (etcd's
``If(Compare(CreateRevision(leaderKey), "=", leaderRev))``): the lock's version, or the lock's
creation in the same transaction, plus the versions of the epoch and breadcrumb just read.

Blocking and cancellation: each call waits for one backend round trip (``release_lock`` and
``resign`` for two) and has no timeout of its own; the elector bounds it with its op timeout.
Cancelled, a call is like any interrupted request: a create or a transaction may or may not
have applied, and the machine finds out by reading the lock again (rule R2).
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from urllib.parse import quote

import anyio

from ..drivers.base import Check, Create, Delete, Driver, Op, SetData, Stat
from ..errors import (
    BadVersion,
    ConfigurationError,
    CorruptData,
    NodeExists,
    NoNode,
    TransactionFailed,
)
from .events import (
    ClaimActive,
    ClaimConflict,
    Claimed,
    CommitActive,
    CommitConflict,
    Committed,
    DeleteBreadcrumb,
    ElectionRead,
    EpochSuperseded,
    LockCreated,
    LockExists,
    LockMissing,
    LockOwned,
    VerifyEpoch,
)

__all__ = (
    "BREADCRUMB_FORMAT",
    "Breadcrumb",
    "ElectionNodes",
    "decode_breadcrumb",
    "decode_epoch",
    "encode_breadcrumb",
    "encode_epoch",
    "identity_bytes",
)

BREADCRUMB_FORMAT = "ha.breadcrumb/1"


# --- codecs ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Breadcrumb:
    """Who was active last, with which epoch: left in the backend for the next active."""

    identity: bytes
    epoch: int
    data: bytes = b""


def identity_bytes(identity: bytes | str) -> bytes:
    """A contender's identity as stored in the lock and the breadcrumb: non-empty bytes."""
    if isinstance(identity, str):
        identity = identity.encode()
    if not isinstance(identity, bytes | bytearray) or not identity:
        raise ConfigurationError("identity must be non-empty bytes or str (e.g. b'host-a:7077')")
    return bytes(identity)


def encode_breadcrumb(crumb: Breadcrumb) -> bytes:
    return json.dumps(
        {
            "format": BREADCRUMB_FORMAT,
            "identity": base64.b64encode(crumb.identity).decode(),
            "epoch": crumb.epoch,
            "data": base64.b64encode(crumb.data).decode(),
        },
        separators=(",", ":"),
    ).encode()


def decode_breadcrumb(raw: bytes) -> Breadcrumb | None:
    """The breadcrumb in ``raw``, or None when it is not one of ours (corrupt or foreign).

    None is an answer, not an error: the machine hands such bytes to the fence hook as they are
    (whoever wrote them may still be active), and ``ha status`` lists them as a problem.
    """
    try:
        doc = json.loads(raw)
        if doc.get("format") != BREADCRUMB_FORMAT:
            return None
        epoch = doc["epoch"]
        if not isinstance(epoch, int) or isinstance(epoch, bool):
            return None
        return Breadcrumb(
            base64.b64decode(doc["identity"], validate=True),
            epoch,
            base64.b64decode(doc.get("data", ""), validate=True),
        )
    except (ValueError, TypeError, KeyError, AttributeError):
        return None


def encode_epoch(epoch: int) -> bytes:
    return str(epoch).encode()


def decode_epoch(raw: bytes) -> int | None:
    """The counter in ``raw`` (ASCII decimal), or None when it is not a number.

    Readers that only report (``ha status``, ``ha run``'s failover watch) take None as "unknown";
    the elector refuses to take over (``ElectionNodes.read_epoch`` raises ``CorruptData``).
    """
    try:
        return int(raw.decode("ascii"))
    except ValueError:  # UnicodeDecodeError is one
        return None


# --- the nodes -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ElectionNodes:
    """The nodes of the election at ``path``, and the backend calls on them."""

    path: str

    @property
    def lock(self) -> str:
        return f"{self.path}/lock"

    @property
    def breadcrumb(self) -> str:
        return f"{self.path}/breadcrumb"

    @property
    def epoch(self) -> str:
        return f"{self.path}/epoch"

    @property
    def members(self) -> str:
        return f"{self.path}/members"

    def member(self, identity: bytes | str) -> str:
        """One supervisor's node: its identity, percent-encoded into one path segment."""
        return f"{self.members}/{quote(identity, safe='')}"

    @property
    def failover(self) -> str:
        return f"{self.path}/failover"

    # --- reads --------------------------------------------------------------------------------

    async def read_lock(
        self, driver: Driver, session: int, identity: bytes
    ) -> LockOwned | LockMissing:
        try:
            holder, stat = await driver.get(self.lock)
        except NoNode:
            return LockMissing(session)
        # several electors may share one session (one per election or not): the lock is ours
        # only if our session created it AND it names us (identities are unique per election)
        ours = stat.ephemeral_owner == session and holder == identity
        return LockOwned(session, ours, holder, stat.version)

    async def read_epoch(self, driver: Driver) -> tuple[int, int | None]:
        """(epoch, node version); (0, None) when there is no epoch node yet.

        Raises ``CorruptData`` for a counter that is not a non-negative decimal: taking over
        from it could send fencing tokens back, so nobody does until an operator repairs it.
        """
        try:
            raw, stat = await driver.get(self.epoch)
        except NoNode:
            return 0, None
        value = decode_epoch(raw)
        if value is None:
            raise CorruptData(self.epoch, f"epoch is not a decimal number: {raw[:40]!r}")
        if value < 0:
            raise CorruptData(self.epoch, f"epoch is negative: {value}")
        return value, stat.version

    async def read_election(self, driver: Driver, session: int) -> ElectionRead:
        """The breadcrumb and the epoch, read at once (one round trip on the way to ACTIVE)."""
        crumb: tuple[bytes | None, int | None] = (None, None)
        epoch: tuple[int, int | None] = (0, None)
        errors: list[Exception] = []

        # the children never raise: an error beside a cancellation (the op's timeout) would
        # leave the task group as a BaseExceptionGroup that nothing above can handle (trio)
        async def read_crumb() -> None:
            nonlocal crumb
            try:
                raw, stat = await driver.get(self.breadcrumb)
                crumb = (raw, stat.version)
            except NoNode:
                pass
            except Exception as exc:
                errors.append(exc)

        async def read_epoch() -> None:
            nonlocal epoch
            try:
                epoch = await self.read_epoch(driver)
            except Exception as exc:
                errors.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(read_crumb)
            tg.start_soon(read_epoch)
        if errors:
            raise errors[0]
        return ElectionRead(session, crumb[0], crumb[1], epoch[0], epoch[1])

    async def verify_epoch(self, driver: Driver, effect: VerifyEpoch) -> EpochSuperseded | None:
        """None while the epoch node still has the version our commit gave it."""
        try:
            _, stat = await driver.get(self.epoch)
        except NoNode:
            return EpochSuperseded(effect.session, effect.epoch)
        if stat.version == effect.epoch_version:
            return None
        return EpochSuperseded(effect.session, effect.epoch)

    # --- writes -------------------------------------------------------------------------------

    async def create_lock(
        self, driver: Driver, session: int, identity: bytes
    ) -> LockCreated | LockExists:
        try:
            await driver.create(self.lock, identity, ephemeral=True, makepath=True)
        except NodeExists:
            return LockExists(session)
        return LockCreated(session, 0)

    async def commit(
        self, driver: Driver, effect: CommitActive, crumb: Breadcrumb
    ) -> Committed | CommitConflict:
        """R4: under the lock's version, bump the epoch by compare-and-set, write ``crumb``."""
        lock = Check(self.lock, effect.lock_version)
        done = await self._take_over(
            driver, lock, crumb, effect.epoch_version, effect.breadcrumb_version
        )
        if isinstance(done, int):
            return CommitConflict(effect.session, lock_lost=done == 0)
        return Committed(effect.session, crumb.epoch, *done)

    async def claim(
        self, driver: Driver, effect: ClaimActive, crumb: Breadcrumb
    ) -> Claimed | ClaimConflict:
        """R12: create the lock naming ``crumb.identity``, bump the epoch, write ``crumb``."""
        lock = Create(self.lock, crumb.identity, ephemeral=True)
        done = await self._take_over(
            driver, lock, crumb, effect.epoch_version, effect.breadcrumb_version
        )
        if isinstance(done, int):
            return ClaimConflict(effect.session, lock_exists=done == 0)
        return Claimed(effect.session, crumb.epoch, *done)

    async def _take_over(
        self,
        driver: Driver,
        lock: Op,
        crumb: Breadcrumb,
        epoch_version: int | None,
        crumb_version: int | None,
    ) -> tuple[int, int] | int:
        """One transaction: ``lock``, then the epoch of ``crumb`` and ``crumb``, each checked
        against the version read (None: the node did not exist, so it is created, and the
        create fails if it appeared). The new (epoch, breadcrumb) versions, or the index of
        the operation that failed."""
        epoch, raw = encode_epoch(crumb.epoch), encode_breadcrumb(crumb)
        ops = [
            lock,
            Create(self.epoch, epoch)
            if epoch_version is None
            else SetData(self.epoch, epoch, epoch_version),
            Create(self.breadcrumb, raw)
            if crumb_version is None
            else SetData(self.breadcrumb, raw, crumb_version),
        ]
        try:
            results = await driver.transaction(ops)
        except TransactionFailed as exc:
            return exc.index
        return _version(results[1]), _version(results[2])

    async def release_lock(self, driver: Driver, session: int, identity: bytes) -> None:
        """Delete the lock if ``session`` holds it naming ``identity``; done when it is not ours.

        ZooKeeper cannot check the owner inside a transaction, so this reads then deletes by
        version; the lock can only change hands in between if a third party deleted it.
        Other errors (connection lost, ...) are raised: the lock may still be ours.
        """
        try:
            holder, stat = await driver.get(self.lock)
            if stat.ephemeral_owner == session and holder == identity:
                await driver.delete(self.lock, stat.version)
        except (NoNode, BadVersion):
            pass

    async def resign(self, driver: Driver, effect: DeleteBreadcrumb) -> None:
        """R10: delete our breadcrumb and our lock in one transaction (one write per handover).

        If the lock is not as we left it, the breadcrumb alone is deleted by its version (the
        ReleaseLock that follows releases the lock if it is still ours). Raises ``DriverError``
        when the breadcrumb is not ours any more, or cannot be reached.
        """
        try:
            await driver.transaction(
                [Delete(self.breadcrumb, effect.version), Delete(self.lock, effect.lock_version)]
            )
        except TransactionFailed as exc:
            if exc.index == 0:
                raise exc.cause from None
            await driver.delete(self.breadcrumb, effect.version)


def _version(result: str | Stat | None) -> int:
    return result.version if isinstance(result, Stat) else 0
