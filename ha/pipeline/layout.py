"""Where the job manager keeps its own nodes, beside the stores, and what the failure record holds.

Clients hold no lease, so they cannot write the fenced stores: they drop a submission or a
cancel request under ``pipeline/`` and ring the doorbell; the active moves each submission into
the execution plan store. Nodes of one cluster (``<prefix>/<cluster_id>/``, the stores' root)::

    election/...                        the cluster's one election (``ha.services``): its job
                                        managers, and any other component of their processes
    leader/jobmanager                   the active job manager's identity (``LeaderInfo``)
    pipeline/inbox                      the doorbell: its data (a time) is rewritten to wake it
    pipeline/inbox/<job_id>             a submitted plan (``JobPlan``'s JSON), until taken
    pipeline/cancel/<job_id>            a cancel request (a time), until the job has a result
    pipeline/failures/<job_id>          {"failures": n, "last_error": "..."}: failed attempts
                                        so far (fenced; the active's bookkeeping)
    pipeline/attempts/<job_id>          {"deaths": d, "open": {...} | null}: the attempt that
                                        has not ended, and job managers that died running
                                        the job (fenced; ``attempts``)
    pipeline/streams/<job_id>/batch-N   a streaming job's commit record of micro-batch N
                                        (fenced; the newest and a window before it are kept
                                        as the job's commit log, ``stream_commit``)

``JobLayout`` is a ``stores.Layout``, so one object names both these nodes and the stores'.
The inbox, cancel and doorbell nodes are written by clients, unfenced; only the failure and
attempt records and commit records are written under the active's lease (``stores.Writer``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from ..errors import CorruptData
from ..stores.layout import Layout, check_name

__all__ = ("JobLayout", "failure_record", "read_failures")


@dataclass(frozen=True, slots=True)
class JobLayout(Layout):
    """The paths of one cluster's job manager nodes (and, inherited, of its stores)."""

    @property
    def election(self) -> str:
        """The cluster's election, the HA services' (``HAServices.election_path``)."""
        return f"{self.root}/election"

    @property
    def leader(self) -> str:
        """Where the active job manager's identity is published (``leader_retrieval``)."""
        return f"{self.root}/leader/jobmanager"

    @property
    def old_election(self) -> str:
        """The job managers' own election before they became a component of the services:
        a job manager refuses to start while an older one is queued there."""
        return f"{self.root}/jobmanager"

    @property
    def inbox(self) -> str:
        return f"{self.root}/pipeline/inbox"

    @property
    def cancels(self) -> str:
        return f"{self.root}/pipeline/cancel"

    @property
    def failures(self) -> str:
        return f"{self.root}/pipeline/failures"

    @property
    def attempts(self) -> str:
        return f"{self.root}/pipeline/attempts"

    @property
    def streams(self) -> str:
        return f"{self.root}/pipeline/streams"

    def stream_commits(self, job_id: str) -> str:
        return f"{self.streams}/{check_name('job_id', job_id)}"

    def stream_commit(self, job_id: str, batch_id: int) -> str:
        return f"{self.stream_commits(job_id)}/batch-{batch_id:05d}"

    def submission(self, job_id: str) -> str:
        return f"{self.inbox}/{check_name('job_id', job_id)}"

    def cancel(self, job_id: str) -> str:
        return f"{self.cancels}/{check_name('job_id', job_id)}"

    def failure(self, job_id: str) -> str:
        return f"{self.failures}/{check_name('job_id', job_id)}"

    def attempt(self, job_id: str) -> str:
        return f"{self.attempts}/{check_name('job_id', job_id)}"


# The failure record predates the stores' versioned documents; its bytes stay as they are.
def failure_record(failures: int, error: str) -> bytes:
    return json.dumps({"failures": failures, "last_error": error}).encode()


def read_failures(path: str, data: bytes) -> int:
    """The failure count of the record at ``path``; CorruptData if it is not one."""
    try:
        doc = json.loads(data)
    except ValueError as exc:
        raise CorruptData(path, f"not a failure record: {exc}") from exc
    if not isinstance(doc, dict) or "failures" not in doc:
        raise CorruptData(path, "not a failure record: no 'failures' field")
    value = doc["failures"]
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise CorruptData(path, f"bad failure count {value!r}")
    return value
