"""One job in one leadership term: the ``JobRun`` protocol and the ``TermContext`` it is handed.

A run sees its term through ``TermContext`` only: frozen, made once per term by the job manager,
holding what a run may use (the stores and the writer fenced by the term's lease, Spark, the
event sink, the manager's portal for Spark's callback threads, and a way to leave the
election). It never sees the term's queue or the manager. ``batch.BatchRun`` and
``stream.StreamRun`` are the two runs; the term picks one per job and awaits it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

import anyio
from anyio.from_thread import BlockingPortal

from ....drivers.base import Driver
from ....election.lease import Lease
from ....stores import JobOutcome, Stores, Writer
from ...layout import JobLayout

__all__ = ("Emit", "JobRun", "Result", "SparkWork", "TermContext")

Emit = Callable[..., None]  # JobManager.emit: (name, **fields)
Result = tuple[JobOutcome, dict[str, Any]]  # a job's outcome and its result's detail


@dataclass(frozen=True, slots=True)
class TermContext:
    """What a run may use of its term. ``portal`` is the job manager's: it outlives the term, so
    a late micro-batch of a deposed term still reaches the fence and is refused there.
    ``leave`` makes the job manager leave the election (Spark's JVM is gone: a standby with a
    live session takes over)."""

    identity: str
    stores: Stores
    writer: Writer
    layout: JobLayout
    lease: Lease
    spark: Any
    emit: Emit
    portal: BlockingPortal
    leave: Callable[[], None]
    checkpointing: bool = True

    @property
    def driver(self) -> Driver:
        return self.writer.driver

    @property
    def epoch(self) -> int:
        return self.lease.epoch


class JobRun(Protocol):
    """One job in one term."""

    async def run(self) -> Result:
        """Run the job from where it stands to its end in this term; its outcome and detail.
        Cancelled when the term ends: the attempt is closed (``attempts``), then it re-raises."""
        ...

    def cancel(self) -> None:
        """A cancel request (from the term's other task): interrupt the Spark work in progress,
        never a store write; ``run`` returns CANCELLED at its next turning point."""
        ...


class SparkWork:
    """A run's cancel request: a flag, and the scope of the Spark work in progress, if any."""

    __slots__ = ("_scope", "cancelled")

    def __init__(self) -> None:
        self.cancelled = False
        self._scope: anyio.CancelScope | None = None

    def cancel(self) -> None:
        self.cancelled = True
        if self._scope is not None:
            self._scope.cancel()

    @contextmanager
    def interruptible(self) -> Iterator[None]:
        """Around Spark work only: a cancel request cancels what runs inside."""
        try:
            with anyio.CancelScope() as self._scope:
                yield
        finally:
            self._scope = None
