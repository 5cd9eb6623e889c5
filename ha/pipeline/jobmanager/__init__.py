"""The job manager: a component of its process's HA services that runs jobs while it leads.

- ``manager``: ``JobManager``, the component (its grant builds a term) and its standby work;
- ``term``: one leadership term: asks the pure ``rules`` what to do, then does that I/O;
- ``runs``: one job in one term (``JobRun``): ``batch`` and ``stream``, each handed a frozen
  ``TermContext`` instead of the term and the manager;
- ``attempts``: a job's failures and job manager deaths across failovers;
- ``rehearsal``: a hot standby runs each stored stream's query once, in private;
- ``worker``: a job manager process (``python -m ha.pipeline.jobmanager.worker``,
  ``run_job_manager``: ``ha jobs manager``).
"""

from __future__ import annotations

from .manager import EventSink, JobManager

__all__ = ("EventSink", "JobManager")
