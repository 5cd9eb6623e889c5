"""P17: no term on stale contact. The runner answers a StartActive whose local deadline has
passed with DeadlineExpired (``elector.py``); here, for every way to ACTIVE, the machine then
stops, and acts on nothing but a fresh listing's answer: not on events it had buffered."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from ha.election import events as ev
from ha.election.machine import Machine, Phase
from tests.support.machine import (
    L_CRUMB,
    L_TICKET,
    LEADER,
    S1,
    TOKEN,
    active,
    first,
    joined,
    kinds,
    mine,
    queued,
    standby,
)


def by_first_in_queue() -> tuple[Machine, list[ev.Effect]]:
    mach = first(joined())
    return mach, mach.handle(ev.CrumbsRead(S1, ()))


def by_graceful_fast_path() -> tuple[Machine, list[ev.Effect]]:
    mach = standby()
    return mach, mach.handle(ev.CrumbDeleted(S1, L_TICKET))


def by_fencing_a_crash() -> tuple[Machine, list[ev.Effect]]:
    mach = standby()
    assert mach.handle(ev.NodeDeleted(S1, LEADER)) == [ev.FenceOldActive(S1, L_CRUMB)]
    return mach, mach.handle(ev.FenceSucceeded(S1))


def by_reconnect() -> tuple[Machine, list[ev.Effect]]:
    mach = standby()
    mach.handle(ev.Disconnected(S1))
    assert kinds(mach.handle(ev.Reconnected(S1))) == ["ListQueue"]
    assert kinds(queued(mach)) == ["ReadCrumbs"]
    return mach, mach.handle(ev.CrumbsRead(S1, ()))


def by_a_second_win_after_a_deadline() -> tuple[Machine, list[ev.Effect]]:
    mach = active()
    assert kinds(mach.handle(ev.DeadlineExpired(S1)))[:2] == ["StopActive", "ListQueue"]
    assert kinds(queued(mach)) == ["ReadCrumbs"]
    return mach, mach.handle(ev.CrumbsRead(S1, ()))


WAYS: dict[str, Callable[[], tuple[Machine, list[ev.Effect]]]] = {
    "first": by_first_in_queue,
    "graceful": by_graceful_fast_path,
    "fenced": by_fencing_a_crash,
    "reconnect": by_reconnect,
    "again": by_a_second_win_after_a_deadline,
}


@pytest.mark.parametrize("way", WAYS)
def test_a_start_refused_for_stale_contact_lists_again_and_waits_for_the_answer(
    way: str,
) -> None:
    mach, effects = WAYS[way]()
    assert kinds(effects)[0] == "StartActive" and mach.phase is Phase.ACTIVE
    # the runner found the contact stale: the term never began
    refused = mach.handle(ev.DeadlineExpired(S1))
    assert kinds(refused)[:2] == ["StopActive", "ListQueue"]
    assert mach.phase is Phase.LISTING and mach.epoch is None
    # what the stalled process had buffered moves nothing now
    for late in (
        ev.CrumbDeleted(S1, L_TICKET),
        ev.NodeDeleted(S1, LEADER),
        ev.PredecessorGone(S1, LEADER),
        ev.FenceSucceeded(S1),
        ev.CrumbsRead(S1, ()),
    ):
        assert mach.handle(late) == [], late
    # only the listing's answer (new contact), then a read of the breadcrumbs (what it knew
    # was lost), makes it lead again, with the same token
    assert kinds(queued(mach)) == ["ReadCrumbs"]
    again = mach.handle(ev.CrumbsRead(S1, ()))
    assert again[0] == ev.StartActive(S1, TOKEN, mine(mach))


def test_a_start_refused_while_disconnected_waits_offline() -> None:
    mach, _ = by_graceful_fast_path()
    mach.handle(ev.Disconnected(S1))  # arrives after the win, before the refusal
    assert mach.phase is Phase.OFFLINE
    assert mach.handle(ev.DeadlineExpired(S1)) == []  # nothing left to stop: already stopped
