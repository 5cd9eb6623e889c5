"""The embedded default backend: one SQLite file shared by the processes of one machine."""

from __future__ import annotations

from .driver import SqliteDriver
from .settings import default_path, default_url

__all__ = ("SqliteDriver", "default_path", "default_url")
