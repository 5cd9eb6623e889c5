"""Job results: which jobs finished, and whether their cleanup is done (Flink's JobResultStore).

A finished job's result is written *dirty*; once every resource of the job has been cleaned up
it is marked *clean*. A new leader lists the dirty results and finishes their cleanup, and
treats any job with an entry as finished (it must not be run again). Entries are never removed
by the store: they are the record that the job is done.

Node: ``<root>/job-results/<job_id>`` holding
``{"format": "ha.job-result", "v": 1, "job_id", "state": "dirty"|"clean", "outcome", "detail"}``.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..drivers.base import Driver, SetData
from ..election.lease import Lease
from ..errors import BadVersion, ConfigurationError, CorruptData, NoNode, TransactionFailed
from . import codec
from .fencing import Writer
from .layout import Layout, check_name

__all__ = ("JobOutcome", "JobResult", "JobResultEntry", "JobResultStore")

KIND = "ha.job-result"


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


class JobResultStore:
    def __init__(self, driver: Driver, layout: Layout, *, lease: Lease | None = None) -> None:
        self.root = layout.job_results
        self._driver = driver
        self._writer = Writer(driver, lease)

    def _path(self, job_id: str) -> str:
        return f"{self.root}/{check_name('job_id', job_id)}"

    def _encode(self, result: JobResult, state: _State) -> bytes:
        try:
            return codec.encode(
                KIND,
                {
                    "job_id": result.job_id,
                    "state": state.value,
                    "outcome": JobOutcome(result.outcome).value,
                    "detail": dict(result.detail),
                },
            )
        except (TypeError, ValueError) as exc:
            raise ConfigurationError(f"job result of {result.job_id} is not JSON: {exc}") from None

    def _decode(self, path: str, job_id: str, data: bytes) -> JobResultEntry:
        doc = codec.decode(path, data, KIND)
        stored_id = codec.field(path, doc, "job_id", str)
        if stored_id != job_id:
            raise CorruptData(path, f"holds the result of job {stored_id!r}")
        state = codec.field_enum(path, doc, "state", _State)
        outcome = codec.field_enum(path, doc, "outcome", JobOutcome)
        detail = codec.field(path, doc, "detail", dict)
        return JobResultEntry(JobResult(job_id, outcome, detail), state is _State.CLEAN)

    # --- writes -----------------------------------------------------------------------------

    async def create_dirty(self, result: JobResult) -> None:
        """Record a finished job whose cleanup is pending. NodeExists if it has an entry."""
        path = self._path(result.job_id)
        await self._writer.create(path, self._encode(result, _State.DIRTY))

    async def mark_clean(self, job_id: str) -> None:
        """The job's cleanup is done. NoNode if it has no entry; idempotent otherwise."""
        path = self._path(job_id)
        for attempt in range(3):
            data, stat = await self._driver.get(path)
            entry = self._decode(path, job_id, data)  # never overwrite what we cannot read
            ops = [SetData(path, self._encode(entry.result, _State.CLEAN), stat.version)]
            try:
                await self._writer.commit(ops)
                return
            except TransactionFailed as exc:
                if attempt < 2 and isinstance(exc.cause, BadVersion):
                    continue
                raise exc.cause from exc

    # --- reads ------------------------------------------------------------------------------

    async def get(self, job_id: str) -> JobResultEntry | None:
        path = self._path(job_id)
        try:
            data, _ = await self._driver.get(path)
        except NoNode:
            return None
        return self._decode(path, job_id, data)

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
