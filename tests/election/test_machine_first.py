"""P7's short way: a listing that shows us first, with every breadcrumb owned by a node of that
listing, has nobody to fence, so the machine acts on it without reading the breadcrumbs."""

from __future__ import annotations

from ha.election import events as ev
from ha.election.machine import Phase, State
from tests.support.machine import OTHER, S1, TOKEN, joined, kinds, mine


def test_first_with_no_stray_breadcrumb_acts_at_once() -> None:
    mach = joined()
    effects = mach.handle(ev.Queued(S1, mine(mach), TOKEN, (), OTHER, False))
    assert effects[0] == ev.StartActive(S1, TOKEN, mine(mach))
    assert "ReadCrumbs" not in kinds(effects) and "FenceOldActive" not in kinds(effects)
    assert mach.phase is Phase.ACTIVE and mach.state is State.ACTIVE and mach.epoch == TOKEN


def test_first_with_strays_reads_the_breadcrumbs() -> None:
    mach = joined()
    effects = mach.handle(ev.Queued(S1, mine(mach), TOKEN, (), OTHER, True))
    assert effects[-1] == ev.ReadCrumbs(S1, mach.ticket or "", TOKEN)
    assert mach.phase is Phase.READING


def test_a_standby_whose_predecessor_left_acts_on_the_listing() -> None:
    """The node below ours was not the leader's: when it goes, one listing (queue and
    breadcrumbs together) is enough to lead, as Curator's LeaderLatch needs one getChildren."""
    mach = joined()
    below = ("other%3A2_a_0000000001", "third%3A3_b_0000000002")
    mach.handle(ev.Queued(S1, mine(mach), TOKEN, below, OTHER, False))
    mach.handle(ev.Watching(S1, below[-1], None, True))
    assert mach.phase is Phase.STANDBY
    relist = mach.handle(ev.NodeDeleted(S1, below[-1]))
    assert relist == [ev.ListQueue(S1, mach.ticket or "", TOKEN)]
    effects = mach.handle(ev.Queued(S1, mine(mach), TOKEN, (), OTHER, False))
    assert kinds(effects)[0] == "StartActive" and mach.phase is Phase.ACTIVE


def test_a_leader_announcing_itself_is_watched_as_the_leader() -> None:
    """P4: the node below ours writes its data once it leads: we list again and watch it (and
    its breadcrumb) as the leader's, so that its crash or exit then costs no listing."""
    mach = joined()
    below = ("other%3A2_a_0000000001", "third%3A3_b_0000000002")
    mach.handle(ev.Queued(S1, mine(mach), TOKEN, below, OTHER, False))
    mach.handle(ev.Watching(S1, below[-1], None, True))
    assert mach.handle(ev.NodeChanged(S1, below[0])) == []  # not the node we watch
    relist = mach.handle(ev.NodeChanged(S1, below[-1]))
    assert relist == [ev.ListQueue(S1, mach.ticket or "", TOKEN)]
    assert mach.state is State.STANDBY  # still standby while it looks
    effects = mach.handle(ev.Queued(S1, mine(mach), TOKEN, below[1:], OTHER, False))
    assert effects == [ev.Watch(S1, below[-1], True)]
    # once watched as the leader's, its announcement changes nothing
    mach.handle(ev.Watching(S1, below[-1], b"crumb", False))
    assert mach.handle(ev.NodeChanged(S1, below[-1])) == []


def test_a_new_leader_announces_itself_after_it_starts() -> None:
    mach = joined()
    effects = mach.handle(ev.Queued(S1, mine(mach), TOKEN, (), OTHER, False))
    # reported before any call to the backend (a crash there must not hide the term)
    assert kinds(effects)[:3] == ["StartActive", "Report", "Announce"]
    assert effects[2] == ev.Announce(S1, mine(mach))


def test_a_leader_listed_with_nobody_behind_it_writes_no_announce() -> None:
    """P4: whoever joins after that listing finds it first and watches it as the leader's;
    the term is still recorded (the Announce effect, without its write)."""
    mach = joined()
    effects = mach.handle(ev.Queued(S1, mine(mach), TOKEN, (), OTHER, False, behind=False))
    assert kinds(effects)[:3] == ["StartActive", "Report", "Announce"]
    assert effects[2] == ev.Announce(S1, mine(mach), write=False)


def test_a_ticket_that_acted_keeps_its_breadcrumb_on_a_later_failure() -> None:
    """Found by the cluster property test (disconnect, then a transient fault): a leader that
    lost contact, stopped, and then failed to list the queue deleted its breadcrumb with its
    node, so its successor took over unfenced. Only a resign says nobody needs fencing."""
    mach = joined()
    mach.handle(ev.Queued(S1, mine(mach), TOKEN, (), OTHER, False))
    ticket, node = mach.ticket or "", mine(mach)
    assert mach.phase is Phase.ACTIVE
    mach.handle(ev.Disconnected(S1))
    mach.handle(ev.Reconnected(S1))  # lists the queue again
    effects = mach.handle(ev.OperationFailed(S1, "list queue", "boom", True))
    assert ev.Leave(S1, ticket, node, True) in effects  # keep_crumb


def test_a_start_is_reported_before_any_call_to_the_backend() -> None:
    """Found by the cluster property test (a crash while taking over): a run cancelled during
    the call after StartActive left a term started and never reported ACTIVE."""
    mach = joined()
    mach.handle(ev.Queued(S1, "x_1_0000000001", TOKEN, (), OTHER, True))
    mach.handle(ev.CrumbsRead(S1, (("old_1", b"foreign"),)))
    effects = mach.handle(ev.FenceSucceeded(S1))
    assert kinds(effects)[:2] == ["StartActive", "Report"]
    assert kinds(effects)[2:] == ["ClearCrumbs", "Announce"]
