"""Job results: which jobs finished, and whether their cleanup is done (Flink's JobResultStore).

A finished job's result is written *dirty*; once every resource of the job has been cleaned up
it is marked *clean*. A new leader lists the dirty results and finishes their cleanup, and
treats any job with an entry as finished (it must not be run again).

Clean entries are kept for a while, then removed, so that the store does not grow with the
number of jobs ever run (Flink deletes an entry once it is clean, ``delete-on-commit``, or
after a time to live, FLINK-32806): the newest ``max_retained`` are kept, and none older than
``max_age`` seconds (both options; None: no such limit). ``expired`` names the entries past
their retention, oldest first, and ``remove`` deletes one (fenced): the caller removes what it
keeps of a finished job first, so that a crash in between leaves the entry, due again. A dirty
entry is never removed. A job id whose entry is gone is unknown again: it may be submitted anew.

Node: ``<root>/job-results/<job_id>`` holding ``{"format": "ha.job-result", "v": 1, "job_id",
"state": "dirty"|"clean", "outcome", "detail", "finished_at"}`` (``finished_at``: seconds since
the epoch when the result was recorded; entries written before it was added lack it, and their
node's modification time stands in).
"""

from __future__ import annotations

import enum
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..drivers.base import Delete, Driver, SetData, Stat
from ..election.lease import Lease
from ..errors import BadVersion, ConfigurationError, CorruptData, NoNode, TransactionFailed
from . import codec
from .fencing import Writer
from .layout import Layout, check_name

__all__ = ("JobOutcome", "JobResult", "JobResultEntry", "JobResultStore")

KIND = "ha.job-result"
MAX_RETAINED = 100  # clean results kept, by default


class JobOutcome(enum.Enum):
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    UNKNOWN = "unknown"  # the job ended but its outcome could not be learned


class _State(enum.Enum):
    DIRTY = "dirty"
    CLEAN = "clean"


@dataclass(frozen=True, slots=True)
class JobResult:
    job_id: str
    outcome: JobOutcome
    detail: Mapping[str, Any] = field(default_factory=dict)  # JSON values: error, metrics


@dataclass(frozen=True, slots=True)
class JobResultEntry:
    result: JobResult
    clean: bool
    finished_at: float = 0.0  # wall clock when the result was recorded


class JobResultStore:
    def __init__(
        self,
        driver: Driver,
        layout: Layout,
        *,
        lease: Lease | None = None,
        max_retained: int | None = MAX_RETAINED,
        max_age: float | None = None,
    ) -> None:
        if max_retained is not None and max_retained < 0:
            raise ConfigurationError(f"max_retained must not be negative, got {max_retained}")
        if max_age is not None and not max_age >= 0:
            raise ConfigurationError(f"max_age must be seconds, not negative: {max_age}")
        self.root = layout.job_results
        self.max_retained = max_retained
        self.max_age = max_age
        self._driver = driver
        self._writer = Writer(driver, lease)

    def _path(self, job_id: str) -> str:
        return f"{self.root}/{check_name('job_id', job_id)}"

    def _encode(self, result: JobResult, state: _State, finished_at: float) -> bytes:
        try:
            return codec.encode(
                KIND,
                {
                    "job_id": result.job_id,
                    "state": state.value,
                    "outcome": JobOutcome(result.outcome).value,
                    "detail": dict(result.detail),
                    "finished_at": finished_at,
                },
            )
        except (TypeError, ValueError) as exc:
            raise ConfigurationError(f"job result of {result.job_id} is not JSON: {exc}") from None

    def _decode(self, path: str, job_id: str, data: bytes, stat: Stat) -> JobResultEntry:
        doc = codec.decode(path, data, KIND)
        stored_id = codec.field(path, doc, "job_id", str)
        if stored_id != job_id:
            raise CorruptData(path, f"holds the result of job {stored_id!r}")
        state = codec.field_enum(path, doc, "state", _State)
        outcome = codec.field_enum(path, doc, "outcome", JobOutcome)
        detail = codec.field(path, doc, "detail", dict)
        finished_at = doc.get("finished_at", stat.mtime)  # older entries: their node's time
        if not isinstance(finished_at, int | float) or isinstance(finished_at, bool):
            raise CorruptData(path, f"field 'finished_at' must be a time, found {finished_at!r}")
        result = JobResult(job_id, outcome, detail)
        return JobResultEntry(result, state is _State.CLEAN, float(finished_at))

    # --- writes -----------------------------------------------------------------------------

    async def create_dirty(self, result: JobResult) -> None:
        """Record a finished job whose cleanup is pending. NodeExists if it has an entry."""
        path = self._path(result.job_id)
        await self._writer.create(path, self._encode(result, _State.DIRTY, time.time()))

    async def mark_clean(self, job_id: str) -> None:
        """The job's cleanup is done. NoNode if it has no entry; idempotent otherwise."""
        path = self._path(job_id)
        for attempt in range(3):
            data, stat = await self._driver.get(path)
            entry = self._decode(path, job_id, data, stat)  # never overwrite what we cannot read
            clean = self._encode(entry.result, _State.CLEAN, entry.finished_at)
            ops = [SetData(path, clean, stat.version)]
            try:
                await self._writer.commit(ops)
                return
            except TransactionFailed as exc:
                if attempt < 2 and isinstance(exc.cause, BadVersion):
                    continue
                raise exc.cause from exc

    async def remove(self, job_id: str) -> bool:
        """Delete a clean entry (fenced); False if it was absent. ConfigurationError for a
        dirty one (its cleanup is pending: it must stay)."""
        path = self._path(job_id)
        for attempt in range(3):
            try:
                data, stat = await self._driver.get(path)
            except NoNode:
                return False
            if not self._decode(path, job_id, data, stat).clean:
                raise ConfigurationError(f"the result of job {job_id} is dirty: it must stay")
            try:
                await self._writer.commit([Delete(path, stat.version)])
                return True
            except TransactionFailed as exc:
                if attempt < 2 and isinstance(exc.cause, BadVersion | NoNode):
                    continue
                raise exc.cause from exc
        raise AssertionError("unreachable")

    # --- reads ------------------------------------------------------------------------------

    async def get(self, job_id: str) -> JobResultEntry | None:
        path = self._path(job_id)
        try:
            data, stat = await self._driver.get(path)
        except NoNode:
            return None
        return self._decode(path, job_id, data, stat)

    async def has_entry(self, job_id: str) -> bool:
        return await self.get(job_id) is not None

    async def has_dirty(self, job_id: str) -> bool:
        entry = await self.get(job_id)
        return entry is not None and not entry.clean

    async def has_clean(self, job_id: str) -> bool:
        entry = await self.get(job_id)
        return entry is not None and entry.clean

    async def entries(self) -> list[JobResultEntry]:
        """Every entry, in job id order."""
        try:
            names = await self._driver.children(self.root)
        except NoNode:
            return []
        found = []
        for job_id in names:
            entry = await self.get(job_id)
            if entry is not None:
                found.append(entry)
        return found

    async def dirty_results(self) -> list[JobResult]:
        """The results whose cleanup a new leader must finish."""
        return [e.result for e in await self.entries() if not e.clean]

    async def expired(self, now: float | None = None) -> list[str]:
        """The jobs whose clean entry is past its retention (``now``: wall clock seconds),
        oldest first; an entry that does not decode is never one. Only a listing while the
        entries are no more than ``max_retained`` and there is no ``max_age``; otherwise
        every entry is read."""
        try:
            names = await self._driver.children(self.root)
        except NoNode:
            return []
        if self.max_age is None and (self.max_retained is None or len(names) <= self.max_retained):
            return []
        clean = []
        for job_id in names:
            try:
                entry = await self.get(job_id)
            except (CorruptData, ConfigurationError):
                continue  # never removed: what cannot be read stays where it is
            if entry is not None and entry.clean:
                clean.append((entry.finished_at, job_id))
        clean.sort(reverse=True)  # newest first
        now = time.time() if now is None else now
        found = []
        for place, (finished_at, job_id) in enumerate(clean):
            too_many = self.max_retained is not None and place >= self.max_retained
            if too_many or (self.max_age is not None and now - finished_at > self.max_age):
                found.append(job_id)
        return found[::-1]
