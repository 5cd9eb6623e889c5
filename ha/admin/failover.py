"""Graceful failover: ``ha failover PATH [--to ID]``, and how ``ha run`` supervisors honour it.

In the spirit of Hadoop's ZKFC ``gracefulFailover`` / ``cedeActive``, on a FIFO queue
(``ha/election/nodes.py``): leadership passes in join order, so handing over to a target is
"everyone ahead of it steps aside".

1. The operator writes a request to ``PATH/failover``: the active's identity and epoch ``E``
   (its token, read just before), an optional target, a cooling period and a fresh id. A
   request is *pending* only while the queue's leader has epoch ``E``; once anyone else leads
   it is history, so nothing ever has to clean it up.
2. Every ``ha run`` supervisor watches that node. With a target, each member ahead of it in the
   queue (but the active) leaves and joins again at once: it lands behind the target. Members
   behind the target do nothing.
3. The active cedes once the one next in the queue is the one asked for (at once without a
   target): it takes the request (writes it back marked ``ceding``, checking the version it
   read: a request cleared or replaced since is not taken), stops COMMAND, quits the election
   *without* fencing (its breadcrumb goes with its node, it stopped cleanly) and joins again
   at once at the back, behind the one taking over: the election is never left without a
   standby (Patroni's switchover makes the old primary a replica at once; ZKFC's
   ``cedeActive`` keeps the old active out for a period, which in a pair is a window with no
   standby). Alone in the queue (``force``) it stays out for the cooling period. The next in
   the queue takes over with no further request. Should the members ahead of the target not
   move within the cooling period (on the active's own clock), the active drops the request
   and stays active. No wall clocks are compared between hosts.
4. The operator waits until a leader with an epoch above ``E`` shows up (with a target: the
   target) and reports it.
Only ``ha run`` supervisors honour requests, so ``request_failover`` refuses when the active, or
a contender ahead of the target, is not a registered member.

No request is honoured while the election is paused (``pause.py``: the target could not take
the lead): ``request_failover`` refuses, ``ha pause`` clears a pending request unless the active
has taken it, and a supervisor that reads the pause drops the request (``wait_for_failover``
then says so).

The request is the ``FailoverRequest`` record at ``PATH/failover``
(``ha/membership/records.py``), read and taken by ``ha/membership/requests.py``; the members'
side of the protocol is ``ha/membership/rules.py``. An active ``ha run`` asks for one itself to
hand the lead back to a preferred standby (``--priority``: ``ha/membership/handback.py``).
"""

from __future__ import annotations

import os
import pwd
import secrets
import socket
import time
from contextlib import aclosing

import anyio

from ..drivers.base import Driver
from ..election.nodes import ElectionNodes
from ..errors import ConfigurationError, HAError, NoNode
from ..membership.records import DEFAULT_COOLDOWN, FailoverRequest, text
from ..membership.requests import FailoverError
from .status import ElectionStatus, check_election, election_status, watch_status

__all__ = (
    "NoActive",
    "confirm_failover",
    "request_failover",
    "wait_for_failover",
)


class NoActive(HAError):
    """The operation needs an active and there is none."""


_READY = ("standby", "neutral")  # member states that can take over


def _requester() -> str:
    return f"{_user()}@{socket.gethostname()}:{os.getpid()}"


def _user() -> str:
    """The real user's name, by uid from the password database: ``os.getlogin`` needs a
    login session or a terminal, and ``$USER`` is often unset (cron, systemd, containers).
    A uid with no entry (a container's arbitrary uid): ``$USER``, ``$LOGNAME``, else the uid."""
    uid = os.getuid()
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return os.environ.get("USER") or os.environ.get("LOGNAME") or str(uid)


async def request_failover(
    driver: Driver,
    path: str,
    to: bytes | str | None = None,
    *,
    cooldown: float = DEFAULT_COOLDOWN,
    force: bool = False,
    by: str | None = None,
) -> FailoverRequest:
    """Ask the active at ``path`` to cede, optionally to ``to`` (see the module docstring).

    Raises ``NoActive`` when nobody is active, ``FailoverError`` when the request could not be
    honoured (the target is already active or not a running supervisor, the active is not an
    ``ha run`` supervisor, no standby could take over: unless ``force``, as the service would
    only stop for the cooling period). ``by`` names who asks (default: user@host:pid).
    Returns the request written; ``wait_for_failover`` waits for it.
    """
    check_election(path)
    if not cooldown > 0:
        raise ConfigurationError(f"the cooling period must be positive, got {cooldown}")
    target = to.encode() if isinstance(to, str) else to
    status = await election_status(driver, path)
    if status.active is None or status.epoch is None:
        raise NoActive(f"no active in {path}: nothing to fail over")
    if target is not None and target == status.active:
        raise FailoverError(f"{text(target)!r} is already the active of {path}")
    if status.paused is not None:  # the active would cede and nobody would take over (P16)
        raise FailoverError(f"{path} is paused: `ha resume {path}` first, then fail over")
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
        queue = [e.identity for e in await ElectionNodes(path).entries(driver)]
        ahead = queue[1 : queue.index(target)] if target in queue else queue[1:]
        strangers = sorted({text(i) for i in ahead if i not in members})
        if strangers:
            raise FailoverError(
                f"{', '.join(repr(i) for i in strangers)} ahead of {text(target)!r} in the queue"
                f" of {path} is not an `ha run` supervisor (it has no member node), so it"
                f" cannot be asked to step aside"
            )
    request = FailoverRequest(
        secrets.token_hex(8),
        status.active,
        status.epoch,
        target,
        float(cooldown),
        time.time(),
        by or _requester(),
    )
    node = ElectionNodes(path).failover
    try:
        await driver.set(node, request.encode())
    except NoNode:
        await driver.create(node, request.encode())
    return request


async def wait_for_failover(driver: Driver, path: str, request: FailoverRequest) -> ElectionStatus:
    """Wait until an active with an epoch above the request's shows up; return that status.

    Raises ``FailoverError`` when the old active came back instead, or, with a target, when
    another took over (the old active crashed, or the target left the queue) or the target's
    supervisor gave up. The caller's bound (``anyio.fail_after``) ends a wait in which nobody
    took over (the active dropped the request: the queue did not put the target next).
    """
    async with aclosing(watch_status(driver, path, fallback=0.5)) as statuses:
        async for status in statuses:
            if request.to is not None:
                _check_target(status, request.to)
            leader = status.leader
            if leader is None or leader[1] <= request.epoch:
                if status.paused is not None:  # cleared by the pause, or dropped (pause.py)
                    raise FailoverError(
                        f"{path} was paused (by {status.paused.by}): the failover is off"
                    )
                continue
            identity, epoch = leader
            if identity == request.active:
                raise FailoverError(
                    f"{text(identity)!r} became active again (epoch {epoch}): nobody else took over"
                )
            if request.to is not None and identity != request.to:
                # nobody ahead of the target can win while the request is pending (the active
                # cedes only once the target is next): the request did not go as asked
                raise FailoverError(
                    f"couldn't make {text(request.to)!r} active: {text(identity)!r} took over"
                    f" (epoch {epoch})"
                )
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
