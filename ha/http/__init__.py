"""The ``--http`` endpoint: a small HTTP/1.1 server on anyio (``server.py``) and the routes of a
process in an election (``endpoints.py``): ``/healthz``, ``/readyz``, ``/leader``, ``/metrics``;
``jobs.py`` measures and serves a job manager (any ``ServedJobManager``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_names

if TYPE_CHECKING:
    from .endpoints import ElectionEndpoints
    from .jobs import ServedJobManager, ServedServices, serve_job_manager
    from .server import Handler, Limits, Response, parse_address, serve
else:  # loaded on first use: ha run's parse_address does not load the endpoints and metrics
    __getattr__, __dir__ = lazy_names(
        __name__,
        {
            "ElectionEndpoints": ".endpoints:ElectionEndpoints",
            "ServedJobManager": ".jobs:ServedJobManager",
            "ServedServices": ".jobs:ServedServices",
            "serve_job_manager": ".jobs:serve_job_manager",
            "Handler": ".server:Handler",
            "Limits": ".server:Limits",
            "Response": ".server:Response",
            "parse_address": ".server:parse_address",
            "serve": ".server:serve",
        },
    )

__all__ = (
    "ElectionEndpoints",
    "Handler",
    "Limits",
    "Response",
    "ServedJobManager",
    "ServedServices",
    "parse_address",
    "serve",
    "serve_job_manager",
)
