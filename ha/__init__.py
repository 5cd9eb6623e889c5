"""ha: high availability for Python services, on anyio."""

from __future__ import annotations

from . import errors
from .drivers import connect
from .lease import Lease

__all__ = ("Lease", "connect", "errors")
