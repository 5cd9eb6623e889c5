"""The ``--http`` endpoint: a small HTTP/1.1 server on anyio (``server.py``) and the routes of a
process in an election (``endpoints.py``): ``/healthz``, ``/readyz``, ``/leader``, ``/metrics``.
"""

from __future__ import annotations

from .endpoints import ElectionEndpoints
from .server import Handler, Response, parse_address, serve

__all__ = ("ElectionEndpoints", "Handler", "Response", "parse_address", "serve")
