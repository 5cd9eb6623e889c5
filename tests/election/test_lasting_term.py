"""Work that fails now and then leads again for ever; a crash loop is still fatal (P8).

``become_active`` raising counts as a failure in a row until a term ends otherwise; since
winning again is no progress for it, a stream that failed once a week used to be fatal on the
sixth week, on every process in turn, and the pipeline stopped for good. A term whose work ran
``Timing.lasting_term`` before it raised now starts the count again (Kubernetes'
CrashLoopBackOff and Flink's exponential-delay restarts forget failures after a while of running
too). Judged from the work's own record of its terms and from how the run ended.
"""

from __future__ import annotations

import dataclasses
import math
import uuid

import anyio
import pytest

import ha
from ha.drivers.memory import MemoryDriver
from ha.errors import ConfigurationError, ElectionFailed
from tests.support.harness import FAST

pytestmark = pytest.mark.anyio

LASTING = 0.3  # seconds, for the test: the default is a minute


class Stream:
    """Work that runs ``runs_for`` seconds, then fails: a term's record of each start."""

    def __init__(self, runs_for: float) -> None:
        self.runs_for = runs_for
        self.epochs: list[int] = []

    async def become_active(self, lease: ha.Lease) -> None:
        self.epochs.append(lease.epoch)
        await anyio.sleep(self.runs_for)
        raise RuntimeError(f"the stream failed in term {len(self.epochs)}")


async def run_until(stream: Stream, terms: int) -> BaseException | None:
    """Run one elector with the stream until it started ``terms`` terms or its run ended."""
    timing = dataclasses.replace(FAST, max_retries=1, lasting_term=LASTING)
    ended: list[BaseException] = []
    async with MemoryDriver(f"lasting-{uuid.uuid4()}", session_timeout=2.0) as driver:
        elector = ha.Elector(driver, "/svc", "a", timing=timing)

        async def run() -> None:
            try:
                await elector.run(stream)
            except ElectionFailed as exc:
                ended.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            with anyio.fail_after(30):
                while len(stream.epochs) < terms and not ended:
                    await anyio.sleep(0.01)
            tg.cancel_scope.cancel()
    return ended[0] if ended else None


async def test_work_that_fails_after_running_a_while_leads_again_every_time() -> None:
    stream = Stream(runs_for=LASTING * 1.5)
    ended = await run_until(stream, terms=5)  # max_retries=1: the third failure in a row
    assert ended is None, f"gave up after {len(stream.epochs)} terms that each ran: {ended}"
    assert len(stream.epochs) >= 5 and stream.epochs == sorted(set(stream.epochs))


async def test_work_that_fails_at_once_is_still_fatal_past_max_retries() -> None:
    stream = Stream(runs_for=0.0)
    ended = await run_until(stream, terms=10)
    assert isinstance(ended, ElectionFailed) and "the stream failed" in str(ended)
    assert len(stream.epochs) == 2  # max_retries=1: one retry, then fatal


@pytest.mark.parametrize("bad", [0.0, -1.0, math.nan])
def test_a_lasting_term_must_be_positive(bad: float) -> None:
    with pytest.raises(ConfigurationError, match="lasting_term must be positive"):
        ha.Timing(lasting_term=bad)


def test_never_forgetting_is_legal() -> None:
    assert ha.Timing(lasting_term=math.inf).lasting_term == math.inf
