"""Where an elector's transitions go (``ha.election.reporting``), without a backend."""

from __future__ import annotations

import logging

import anyio
import pytest

from ha.election import events as ev
from ha.election.journal import Transition
from ha.election.machine import State
from ha.election.reporting import FencingStatistics, Reporting

pytestmark = pytest.mark.anyio


def test_fencing_note_names_the_old_active_the_count_and_the_error() -> None:
    later = FencingStatistics("host-a", 5, "RuntimeError('no')", 7.6)
    assert later.note() == "fencing 'host-a' failed 5 times, next try in 8s (RuntimeError('no'))"
    unscheduled = FencingStatistics("host-a", 1, "refused", None)
    assert unscheduled.note() == "fencing 'host-a' failed 1 times (refused)"


async def test_a_transition_reaches_listeners_streams_and_counts() -> None:
    reporting = Reporting("/e", b"host-\xff")
    heard: list[Transition] = []
    reporting.add_listener(heard.append)
    async with reporting.stream() as stream:
        reporting.send(ev.Report(State.NEUTRAL, State.ACTIVE, 3, "won"))
        streamed = stream.receive_nowait()
    [transition] = heard
    assert streamed == transition
    assert (transition.election, transition.identity) == ("/e", "host-\ufffd")
    assert (transition.old, transition.new, transition.epoch, transition.cause) == (
        State.NEUTRAL,
        State.ACTIVE,
        3,
        "won",
    )
    assert dict(reporting.transition_counts()) == {"neutral->active": 1}


async def test_a_listener_that_raises_is_logged_and_kept(caplog: pytest.LogCaptureFixture) -> None:
    reporting = Reporting("/e", b"a")
    calls: list[str] = []

    def broken(transition: Transition) -> None:
        calls.append("broken")
        raise RuntimeError("listener bug")

    reporting.add_listener(broken)
    reporting.add_listener(lambda t: calls.append("next"))
    with caplog.at_level(logging.ERROR, logger="ha.elector"):
        reporting.send(ev.Report(State.NEUTRAL, State.STANDBY, None, "b leads"))
        reporting.send(ev.Report(State.STANDBY, State.NEUTRAL, None, "lost"))
    assert calls == ["broken", "next", "broken", "next"]
    assert [r.getMessage() for r in caplog.records] == ["/e: transition listener raised"] * 2


async def test_a_stream_whose_reader_has_gone_is_dropped() -> None:
    reporting = Reporting("/e", b"a")
    async with reporting.stream() as stream:
        stream.close()
        reporting.send(ev.Report(State.NEUTRAL, State.STANDBY, None, "b leads"))
        reporting.send(ev.Report(State.STANDBY, State.NEUTRAL, None, "lost"))
        with pytest.raises(anyio.ClosedResourceError):
            stream.receive_nowait()
    assert dict(reporting.transition_counts()) == {"neutral->standby": 1, "standby->neutral": 1}
