"""The ``--http`` endpoint: a small HTTP/1.1 server on anyio (``server.py``) and the routes of a
process in an election (``endpoints.py``): ``/healthz``, ``/readyz``, ``/leader``, ``/metrics``;
``jobs.py`` measures and serves a job manager (any ``ServedJobManager``).
"""

from __future__ import annotations

from .endpoints import ElectionEndpoints
from .jobs import ServedJobManager, ServedServices, serve_job_manager
from .server import Handler, Limits, Response, parse_address, serve

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
