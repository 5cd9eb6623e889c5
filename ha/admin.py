"""Operating an election from outside it, on any backend: status, format, graceful failover.

The election at ``PATH`` is the elector's nodes plus two kept by ``ha run`` (all drawn, with
their encodings, in ``ha/election/nodes.py``, which every reader here goes through):

    PATH/lock          ephemeral, the holder's identity            (the elector)
    PATH/breadcrumb    the last active's identity and epoch        (the elector)
    PATH/epoch         the fencing token, a decimal counter        (the elector)
    PATH/members/ID    ephemeral, one per running supervisor: its state, host and pid
    PATH/failover      the last graceful failover request (JSON)

Graceful failover (``ha failover PATH [--to ID]``), in the spirit of Hadoop's ZKFC
``gracefulFailover`` / ``cedeActive``:

1. The operator writes a request to ``PATH/failover``: the active's identity and epoch ``E``
   (read just before), an optional target, a cooling period and a fresh id. A request is
   *pending* only while the epoch node still reads ``E``; once anyone becomes active it is
   history, so nothing ever has to clean it up.
2. Every ``ha run`` supervisor watches that node (and the epoch node). The active whose lease
   has epoch ``E`` cedes: it stops COMMAND, quits the election *without* fencing (its
   breadcrumb is deleted, it stopped cleanly) and stays out for the cooling period.
3. With a target, every other supervisor steps aside too (quits, stays out) until the epoch
   moves past ``E`` or the cooling period has passed on its own clock, whichever comes first;
   so only the target competes for the lock. No wall clocks are compared between hosts.
4. A supervisor that wins while a pending request names another target (it saw the lock go
   before the request) cedes at once, before starting COMMAND: the epoch then moves past
   ``E + 1``, which is harmless (epochs only have to increase).
5. The operator waits until an active with an epoch above ``E`` shows up and reports it.
If the target never takes over, everyone is back in the election after the cooling period:
liveness needs no operator. Only ``ha run`` supervisors honour requests, so
``request_failover`` refuses when the active is not a registered member.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import os
import secrets
import socket
import time
from collections.abc import AsyncGenerator
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

import anyio

from . import errors
from .drivers.base import Driver, validate_path
from .election.nodes import (
    Breadcrumb,
    ElectionNodes,
    decode_breadcrumb,
    decode_epoch,
    encode_epoch,
)
from .errors import ConfigurationError, HAError, NodeExists, NoNode, NotEmpty

__all__ = (
    "DuplicateIdentity",
    "ElectionInUse",
    "ElectionStatus",
    "FailoverError",
    "FailoverRequest",
    "FormatResult",
    "Member",
    "NoActive",
    "claim_member",
    "confirm_failover",
    "election_status",
    "format_election",
    "read_failover",
    "remove_member",
    "request_failover",
    "text",
    "wait_for_failover",
    "watch_status",
    "write_member",
)

log = logging.getLogger("ha.admin")

FAILOVER_FORMAT = "ha.failover/1"
MEMBER_FORMAT = "ha.member/1"
DEFAULT_COOLDOWN = 5.0


class ElectionInUse(HAError):
    """The election's lock is held: formatting it would depose a running active."""


class NoActive(HAError):
    """The operation needs an active and there is none."""


class FailoverError(HAError):
    """A graceful failover was refused or did not complete."""


def text(identity: bytes) -> str:
    """An identity for display: UTF-8, with undecodable bytes escaped."""
    return identity.decode("utf-8", "backslashreplace")


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def _unb64(value: object) -> bytes:
    if not isinstance(value, str):
        raise ValueError("not base64 text")
    return base64.b64decode(value, validate=True)


def _check_election(path: str) -> str:
    validate_path(path)
    if path == "/":
        raise ConfigurationError("the election path must not be the root '/'")
    return path


# --- members: who runs a supervisor -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Member:
    """One ``ha run`` supervisor taking part (its ephemeral node under ``PATH/members``)."""

    identity: bytes
    state: str  # neutral | standby | active | fenced | out (stepped aside, unhealthy, cooling)
    epoch: int | None = None
    host: str = ""
    pid: int = 0
    since: float = 0.0  # wall clock of the last state change
    note: str = ""  # why it is out, for example

    def encode(self) -> bytes:
        return json.dumps(
            {
                "format": MEMBER_FORMAT,
                "identity": _b64(self.identity),
                "state": self.state,
                "epoch": self.epoch,
                "host": self.host,
                "pid": self.pid,
                "since": self.since,
                "note": self.note,
            },
            separators=(",", ":"),
        ).encode()

    @classmethod
    def decode(cls, raw: bytes) -> Member | None:
        try:
            doc = json.loads(raw)
            if doc.get("format") != MEMBER_FORMAT:
                return None
            return cls(
                _unb64(doc["identity"]),
                str(doc["state"]),
                doc.get("epoch"),
                str(doc.get("host", "")),
                int(doc.get("pid", 0)),
                float(doc.get("since", 0.0)),
                str(doc.get("note", "")),
            )
        except (ValueError, TypeError, KeyError, AttributeError, binascii.Error):
            return None

    def to_json(self) -> dict[str, Any]:
        return {
            "identity": text(self.identity),
            "state": self.state,
            "epoch": self.epoch,
            "host": self.host,
            "pid": self.pid,
            "since": self.since,
            "note": self.note,
        }


def member_path(path: str, identity: bytes) -> str:
    return ElectionNodes(path).member(identity)


class DuplicateIdentity(HAError):
    """Another running supervisor already takes part with this identity."""


async def claim_member(driver: Driver, path: str, member: Member, *, wait: float) -> None:
    """Create our member node, refusing an identity another live supervisor holds.

    A node of another session may be a dead supervisor's (a restart after a crash): it is
    waited out for up to ``wait`` seconds (the backend removes it within its session timeout);
    if it is still there, its owner is alive and ``DuplicateIdentity`` is raised.
    """
    node = member_path(path, member.identity)
    deadline = anyio.current_time() + wait
    waited = False
    while True:
        try:
            await driver.create(node, member.encode(), ephemeral=True, makepath=True)
            return
        except NodeExists:
            pass
        except (errors.ConnectionLost, errors.SessionExpired):  # transient: the driver reconnects
            await anyio.sleep(0.2)
            continue
        try:
            raw, stat = await driver.get(node)
        except NoNode:
            continue
        except (errors.ConnectionLost, errors.SessionExpired):
            await anyio.sleep(0.2)
            continue
        if stat.ephemeral_owner == driver.session_id:
            return
        other = Member.decode(raw)
        where = "" if other is None else f" (pid {other.pid} on {other.host}, {other.state})"
        if not waited:
            waited = True
            log.info("another supervisor with this id%s: waiting %.1fs for it to go", where, wait)
        if anyio.current_time() >= deadline:
            raise DuplicateIdentity(
                f"another supervisor with --id {text(member.identity)!r} is running in"
                f" {path}{where}: give each one its own --id"
            )
        await anyio.sleep(0.1)


async def write_member(driver: Driver, path: str, member: Member) -> None:
    """Create or update our member node (ephemeral: it goes with our session).

    Never overwrites the node of another session (a duplicate identity's): that raises
    ``DuplicateIdentity``.
    """
    node = member_path(path, member.identity)
    data = member.encode()
    stat = await driver.exists(node)
    if stat is None:
        await driver.create(node, data, ephemeral=True, makepath=True)
    elif stat.ephemeral_owner == driver.session_id:
        await driver.set(node, data, version=stat.version)
    else:
        raise DuplicateIdentity(f"the member node {node} belongs to another session")


async def remove_member(driver: Driver, path: str, identity: bytes) -> None:
    """Delete our member node; another session's (a duplicate's) is left alone."""
    node = member_path(path, identity)
    try:
        stat = await driver.exists(node)
        if stat is not None and stat.ephemeral_owner == driver.session_id:
            await driver.delete(node, version=stat.version)
    except (NoNode, errors.BadVersion):
        pass


async def list_members(driver: Driver, path: str) -> list[Member]:
    try:
        names = await driver.children(ElectionNodes(path).members)
    except NoNode:
        return []
    members = []
    for name in names:
        try:
            raw, _ = await driver.get(f"{ElectionNodes(path).members}/{name}")
        except NoNode:
            continue
        member = Member.decode(raw)
        if member is None:  # a foreign node: show it by its name
            member = Member(unquote(name).encode(), "unknown")
        members.append(member)
    return members


# --- failover requests --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FailoverRequest:
    """A graceful failover asked of the active of epoch ``epoch`` (see the module docstring)."""

    id: str
    active: bytes  # who was active when it was asked
    epoch: int
    to: bytes | None = None  # the chosen standby, or None: any
    cooldown: float = DEFAULT_COOLDOWN
    requested: float = 0.0  # wall clock, for display only
    by: str = ""

    def encode(self) -> bytes:
        return json.dumps(
            {
                "format": FAILOVER_FORMAT,
                "id": self.id,
                "active": _b64(self.active),
                "epoch": self.epoch,
                "to": None if self.to is None else _b64(self.to),
                "cooldown": self.cooldown,
                "requested": self.requested,
                "by": self.by,
            },
            separators=(",", ":"),
        ).encode()

    @classmethod
    def decode(cls, raw: bytes) -> FailoverRequest | None:
        try:
            doc = json.loads(raw)
            if doc.get("format") != FAILOVER_FORMAT:
                return None
            epoch = doc["epoch"]
            if not isinstance(epoch, int) or isinstance(epoch, bool):
                return None
            to = doc.get("to")
            return cls(
                str(doc["id"]),
                _unb64(doc["active"]),
                epoch,
                None if to is None else _unb64(to),
                float(doc.get("cooldown", DEFAULT_COOLDOWN)),
                float(doc.get("requested", 0.0)),
                str(doc.get("by", "")),
            )
        except (ValueError, TypeError, KeyError, AttributeError, binascii.Error):
            return None

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "active": text(self.active),
            "epoch": self.epoch,
            "to": None if self.to is None else text(self.to),
            "cooldown": self.cooldown,
            "requested": self.requested,
            "by": self.by,
        }


async def read_failover(driver: Driver, path: str) -> FailoverRequest | None:
    """The last request written at ``PATH/failover`` (pending or not), or None."""
    try:
        raw, _ = await driver.get(ElectionNodes(path).failover)
    except NoNode:
        return None
    return FailoverRequest.decode(raw)


# --- status -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ElectionStatus:
    """One reading of an election. ``active`` is set only when the lock's holder has committed
    its breadcrumb at the current epoch, i.e. its ``become_active`` is running."""

    path: str
    exists: bool
    holder: bytes | None = None  # the lock's holder (may still be taking over)
    holder_session: int | None = None
    active: bytes | None = None
    epoch: int | None = None
    since: float | None = None  # wall clock when ``active`` took over
    breadcrumb: Breadcrumb | None = None
    breadcrumb_raw: bytes | None = None
    members: tuple[Member, ...] = ()
    failover: FailoverRequest | None = None
    problems: tuple[str, ...] = field(default=())

    @property
    def leader(self) -> tuple[bytes, int] | None:
        """(identity, epoch) of the active, or None: what ``ha watch`` reports changes of."""
        if self.active is None or self.epoch is None:
            return None
        return self.active, self.epoch

    @property
    def failover_pending(self) -> bool:
        return self.failover is not None and self.failover.epoch == self.epoch

    def to_json(self) -> dict[str, Any]:
        crumb: dict[str, Any] | None = None
        if self.breadcrumb_raw is not None:
            crumb = {"raw_b64": _b64(self.breadcrumb_raw), "valid": self.breadcrumb is not None}
            if self.breadcrumb is not None:
                crumb |= {
                    "identity": text(self.breadcrumb.identity),
                    "epoch": self.breadcrumb.epoch,
                    "data": text(self.breadcrumb.data),
                }
        return {
            "path": self.path,
            "exists": self.exists,
            "active": None if self.active is None else text(self.active),
            "epoch": self.epoch,
            "since": self.since,
            "holder": None if self.holder is None else text(self.holder),
            "breadcrumb": crumb,
            "members": [m.to_json() for m in self.members],
            "failover": None if self.failover is None else self.failover.to_json(),
            "failover_pending": self.failover_pending,
            "problems": list(self.problems),
        }


async def _read(driver: Driver, path: str) -> tuple[bytes, float, int] | None:
    """(data, mtime, version) or None."""
    try:
        data, stat = await driver.get(path)
    except NoNode:
        return None
    return data, stat.mtime, stat.version


async def election_status(driver: Driver, path: str) -> ElectionStatus:
    """Read the election at ``path``. Never raises for odd contents: they land in ``problems``.

    The nodes are read one by one; if the lock changed meanwhile, they are read again (a few
    times), so a reading is consistent unless the election is changing very fast.
    """
    _check_election(path)
    for _ in range(3):
        status, lock_before = await _read_status(driver, path)
        lock_after = await driver.exists(ElectionNodes(path).lock)
        after = None if lock_after is None else (lock_after.ephemeral_owner, lock_after.version)
        if after == lock_before:
            break
    return status


async def _read_status(
    driver: Driver, path: str
) -> tuple[ElectionStatus, tuple[int | None, int] | None]:
    problems: list[str] = []
    nodes = ElectionNodes(path)
    if await driver.exists(path) is None:
        return ElectionStatus(path, exists=False), None
    holder = holder_session = None
    lock_key: tuple[int | None, int] | None = None
    try:
        holder, lock_stat = await driver.get(nodes.lock)
        holder_session = lock_stat.ephemeral_owner
        lock_key = (lock_stat.ephemeral_owner, lock_stat.version)
    except NoNode:
        pass
    epoch: int | None = None
    epoch_mtime: float | None = None
    got = await _read(driver, nodes.epoch)
    if got is not None:
        epoch = decode_epoch(got[0])
        if epoch is None:
            problems.append(f"the epoch node is not a decimal number: {got[0][:40]!r}")
        else:
            epoch_mtime = got[1]
    crumb_raw: bytes | None = None
    crumb: Breadcrumb | None = None
    got = await _read(driver, nodes.breadcrumb)
    if got is not None:
        crumb_raw = got[0]
        crumb = decode_breadcrumb(crumb_raw)
        if crumb is None:
            problems.append("the breadcrumb is not an ha breadcrumb (corrupt or foreign)")
    active = since = None
    if (
        holder is not None
        and crumb is not None
        and crumb.identity == holder
        and epoch is not None
        and crumb.epoch == epoch
    ):
        active, since = holder, epoch_mtime
    failover = None
    got = await _read(driver, nodes.failover)
    if got is not None:
        failover = FailoverRequest.decode(got[0])
        if failover is None:
            problems.append("the failover request node is not an ha failover request")
    members = tuple(await list_members(driver, path))
    status = ElectionStatus(
        path,
        True,
        holder,
        holder_session,
        active,
        epoch,
        since,
        crumb,
        crumb_raw,
        members,
        failover,
        tuple(problems),
    )
    return status, lock_key


async def watch_status(
    driver: Driver, path: str, *, fallback: float = 2.0
) -> AsyncGenerator[ElectionStatus, None]:
    """Yield the election's status now and again after every change of its nodes.

    Changes are learnt from node events; a read every ``fallback`` seconds covers backends
    whose events can be lost (e.g. while disconnected). Use with ``contextlib.aclosing``.
    """
    _check_election(path)
    wake = [anyio.Event()]

    def poke(_event: object) -> None:
        wake[0].set()

    nodes = ElectionNodes(path)
    subs = [
        driver.subscribe(node, poke)
        for node in (nodes.lock, nodes.epoch, nodes.breadcrumb, nodes.failover)
    ]
    subs.append(driver.subscribe(None, poke))
    try:
        while True:
            wake[0] = anyio.Event()  # armed before reading: a change during the read is seen
            yield await election_status(driver, path)
            with anyio.move_on_after(fallback):
                await wake[0].wait()
    finally:
        for sub in subs:
            sub.close()


# --- format -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FormatResult:
    path: str
    created: bool  # the election's node did not exist and was created
    removed: tuple[str, ...] = ()  # nodes cleared (with force)
    epoch: int | None = None  # the epoch counter, kept across a format
    epoch_reset: bool = False  # it was unreadable and was reset to 0
    holder: bytes | None = None  # a live lock holder left in place (with force)


async def format_election(driver: Driver, path: str, force: bool = False) -> FormatResult:
    """Prepare the election at ``path``, like Hadoop's ``zkfc -formatZK``.

    Creates the election's node and its parents. Refuses (``ElectionInUse``) while the lock is
    held, unless ``force``. With ``force`` it clears what no live session holds: a lock node
    that is not ephemeral (left by a foreign tool), members that are not ephemeral, and
    failover requests. It never removes what safety rests on: a lock held by a live session
    stays (deleting it would let a standby start while the deposed active may still be
    stopping, or is cut off and does not know), and so does the breadcrumb (without it the next
    active would skip fencing an old active that may still run). To end a live active's term,
    stop it or ask it to hand over (``ha failover``). The epoch counter is kept, so fencing
    tokens never go back; an unreadable counter is rewritten as 0 (with a higher node
    version, which still fences old writers).
    """
    _check_election(path)
    nodes = ElectionNodes(path)
    created = await driver.exists(path) is None
    await driver.ensure_path(path)
    holder = None
    live_lock = False
    try:
        holder, lock_stat = await driver.get(nodes.lock)
        live_lock = lock_stat.ephemeral_owner is not None
    except NoNode:
        pass
    if holder is not None and not force:
        raise ElectionInUse(
            f"election {path} is in use: {text(holder)!r} holds its lock"
            " (stop it first, or force the format)"
        )
    epoch: int | None = None
    epoch_reset = False
    got = await _read(driver, nodes.epoch)
    if got is not None:
        epoch = decode_epoch(got[0])
        epoch_reset = epoch is None
    if not force:
        return FormatResult(path, created, epoch=epoch, holder=None)
    removed = []
    if holder is not None and not live_lock and await _delete_tree(driver, nodes.lock):
        removed.append("lock")
    if await _delete_tree(driver, nodes.failover):
        removed.append("failover")
    if await _delete_persistent(driver, nodes.members):
        removed.append("members")
    if epoch_reset:
        await driver.set(nodes.epoch, encode_epoch(0))
        epoch = 0
    kept = holder if live_lock else None
    return FormatResult(path, created, tuple(removed), epoch, epoch_reset, kept)


async def _delete_persistent(driver: Driver, path: str) -> bool:
    """Delete the children of ``path`` that no live session holds, then ``path`` if empty."""
    found = False
    try:
        names = await driver.children(path)
    except NoNode:
        return False
    for name in names:
        try:
            _, stat = await driver.get(f"{path}/{name}")
        except NoNode:
            continue
        if stat.ephemeral_owner is None and await _delete_tree(driver, f"{path}/{name}"):
            found = True
    try:
        await driver.delete(path)
    except (NoNode, NotEmpty):
        pass
    return found


async def _delete_tree(driver: Driver, path: str) -> bool:
    """Delete ``path`` and what is below it, children first; False if it was not there.

    Node by node rather than ``delete(recursive=True)``: the memory driver's recursive delete
    fails on nested nodes (KeyError), and this works the same on every backend.
    """
    try:
        for child in await driver.children(path):
            await _delete_tree(driver, f"{path}/{child}")
        await driver.delete(path)
    except NoNode:
        return False
    return True


# --- graceful failover ----------------------------------------------------------------------------


_READY = ("standby", "neutral")  # member states that can take over


def _requester() -> str:
    try:
        user = os.getlogin()
    except OSError:
        user = os.environ.get("USER", "?")
    return f"{user}@{socket.gethostname()}:{os.getpid()}"


async def request_failover(
    driver: Driver,
    path: str,
    to: bytes | str | None = None,
    *,
    cooldown: float = DEFAULT_COOLDOWN,
    force: bool = False,
) -> FailoverRequest:
    """Ask the active at ``path`` to cede, optionally to ``to`` (see the module docstring).

    Raises ``NoActive`` when nobody is active, ``FailoverError`` when the request could not be
    honoured (the target is already active or not a running supervisor, the active is not an
    ``ha run`` supervisor, no standby could take over: unless ``force``, as the service would
    only stop for the cooling period). Returns the request written; ``wait_for_failover``
    waits for it.
    """
    _check_election(path)
    if not cooldown > 0:
        raise ConfigurationError(f"the cooling period must be positive, got {cooldown}")
    target = to.encode() if isinstance(to, str) else to
    status = await election_status(driver, path)
    if status.active is None or status.epoch is None:
        raise NoActive(f"no active in {path}: nothing to fail over")
    if target is not None and target == status.active:
        raise FailoverError(f"{text(target)!r} is already the active of {path}")
    members = {m.identity: m for m in status.members}
    if status.active not in members:
        raise FailoverError(
            f"the active {text(status.active)!r} of {path} is not an `ha run` supervisor"
            " (it has no member node), so it cannot be asked to cede"
        )
    standbys = [i for i, m in members.items() if i != status.active and m.state in _READY]
    if target is None and not standbys and not force:
        raise FailoverError(
            f"no standby can take over {path} (members: "
            + ", ".join(f"{text(i)} {m.state}" for i, m in sorted(members.items()))
            + "): refusing, as it would only stop the service for the cooling period (force it)"
        )
    if target is not None:
        member = members.get(target)
        if member is None or member.state not in _READY:
            running = ", ".join(sorted(text(i) for i in members if i != status.active)) or "none"
            state = "not running" if member is None else f"{member.state}, not a standby"
            raise FailoverError(
                f"{text(target)!r} cannot take over {path}: it is {state} (standbys: {running})"
            )
    request = FailoverRequest(
        secrets.token_hex(8),
        status.active,
        status.epoch,
        target,
        float(cooldown),
        time.time(),
        _requester(),
    )
    node = ElectionNodes(path).failover
    try:
        await driver.set(node, request.encode())
    except NoNode:
        await driver.create(node, request.encode())
    return request


async def wait_for_failover(driver: Driver, path: str, request: FailoverRequest) -> ElectionStatus:
    """Wait until an active with an epoch above the request's shows up; return that status.

    Raises ``FailoverError`` when the old active came back instead. With a target, another
    standby may win the lock first and then give way (it saw the request late): that is waited
    out, and the caller's bound (``anyio.fail_after``) ends a wait in which the target never
    took over.
    """
    async with aclosing(watch_status(driver, path, fallback=0.5)) as statuses:
        async for status in statuses:
            if request.to is not None:
                _check_target(status, request.to)
            leader = status.leader
            if leader is None or leader[1] <= request.epoch:
                continue
            identity, epoch = leader
            if identity == request.active:
                raise FailoverError(
                    f"{text(identity)!r} became active again (epoch {epoch}): nobody else took over"
                )
            if request.to is not None and identity != request.to:
                continue  # a non-target that won before it saw the request gives way
            return status
    raise AssertionError("watch_status never ends")


def _check_target(status: ElectionStatus, to: bytes) -> None:
    """Raise when the target's supervisor has given up: it left, or is out (its COMMAND
    exited or could not start, it is unhealthy), as Hadoop's failover reports a target that
    could not become active."""
    member = next((m for m in status.members if m.identity == to), None)
    if member is None:
        raise FailoverError(f"couldn't make {text(to)!r} active: its `ha run` is gone")
    if member.state == "out":
        raise FailoverError(f"couldn't make {text(to)!r} active: {member.note or 'it is out'}")


async def confirm_failover(
    driver: Driver, path: str, found: ElectionStatus, seconds: float
) -> ElectionStatus:
    """Check that the new active of ``found`` stays active, with its member node saying so,
    for ``seconds``: a COMMAND that dies at once makes its supervisor leave, and that is a
    failed failover, not a done one. Raises ``FailoverError`` otherwise."""
    leader = found.leader
    assert leader is not None
    identity = leader[0]
    started = anyio.current_time()
    lost: float | None = None
    async with aclosing(watch_status(driver, path, fallback=0.1)) as statuses:
        async for status in statuses:
            _check_target(status, identity)
            if status.leader != leader:
                # its member node may tell why a moment later (it is written after the quit)
                lost = anyio.current_time() if lost is None else lost
                if anyio.current_time() - lost < 1.0:
                    continue
                now = "nobody" if status.active is None else repr(text(status.active))
                raise FailoverError(
                    f"couldn't make {text(identity)!r} active: it lost the lead ({now} is active)"
                )
            lost = None
            member = next(m for m in status.members if m.identity == identity)
            if member.state == "active" and anyio.current_time() - started >= seconds:
                return status
    raise AssertionError("watch_status never ends")
