"""The cluster's jobs as the status page shows them (``ha/http/page.py``, through the job
manager's ``job_rows``): ``ha jobs list --json``'s rows, each with its failed attempts
(``failures``), the job managers that died running it (``deaths``, in a row at the same
batch: ``attempts.py``) and the epoch of the term running it now (``epoch``)."""

from __future__ import annotations

import os
from typing import Any

from ...drivers.base import Driver
from ...errors import CorruptData
from ...stores import BlobStore
from ..client import failure_count, list_jobs
from ..layout import JobLayout
from .attempts import read_attempts

__all__ = ("job_rows",)


async def job_rows(
    driver: Driver, layout: JobLayout, *, blobs: BlobStore | str | os.PathLike[str], prefix: str
) -> list[dict[str, Any]]:
    rows = []
    for job in await list_jobs(driver, layout.cluster_id, blobs=blobs, prefix=prefix):
        row = job.to_json() | {"failures": None, "deaths": None, "epoch": None}
        try:
            row["failures"] = await failure_count(driver, layout, job.job_id)
            attempts = await read_attempts(driver, layout, job.job_id)
        except CorruptData:  # the job manager refuses it too, and its state says why
            rows.append(row)
            continue
        row["deaths"] = attempts.deaths
        row["epoch"] = None if attempts.open is None else attempts.open.get("epoch")
        rows.append(row)
    return rows
