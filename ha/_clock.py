"""The loop's clock and CLOCK_MONOTONIC, for readings taken off the loop (threads, processes).

``anyio.current_time()`` is ``time.monotonic()`` on asyncio and ``time.monotonic()`` plus a
constant on trio, so one difference, read on the loop, converts either way. Each function reads
the two clocks in the order that makes the converted time err early, never late: a contact
dated late, or a deadline placed late, would eat into the safety margin.
"""

from __future__ import annotations

import time

import anyio

__all__ = ("loop_minus_monotonic", "monotonic_minus_loop")


def loop_minus_monotonic() -> float:
    """Add to a ``time.monotonic()`` reading to get loop time. Call it on the loop."""
    return anyio.current_time() - time.monotonic()  # the loop first: errs low


def monotonic_minus_loop() -> float:
    """Add to a loop time to get ``time.monotonic()``. Call it on the loop."""
    return time.monotonic() - anyio.current_time()  # monotonic first: errs low
