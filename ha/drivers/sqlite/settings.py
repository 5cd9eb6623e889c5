"""The sqlite driver's settings: where the file is, and timings that can keep a lease alive.

``sqlite:///var/lib/app/ha.db?session_timeout=2&poll_interval=0.1``: the URL's path is the
file's absolute path, as in ``file://`` URLs; ``sqlite://`` alone means ``default_url()``.
Options go in the query string or as keywords (which win).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from ...errors import AccessDenied, ConfigurationError
from .._options import OptionTable, seconds

__all__ = ("OPTIONS", "Settings", "default_path", "default_url", "parse_url")

OPTIONS = OptionTable(
    "sqlite",
    seconds=("session_timeout", "poll_interval", "renew_interval", "busy_timeout"),
    text=("synchronous",),
)


def default_path(*, create: bool = True) -> Path:
    """``$XDG_STATE_HOME/ha/ha.db`` (or ``~/.local/state/ha/ha.db``); creates the directory
    unless ``create`` is false (a command that only reads must leave no trace)."""
    base = os.environ.get("XDG_STATE_HOME", "")
    if not os.path.isabs(base):  # the XDG spec says to ignore relative values
        base = os.path.join(os.path.expanduser("~"), ".local", "state")
    directory = Path(base) / "ha"
    if not create:
        return directory / "ha.db"
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise AccessDenied(
            f"cannot create the state directory {directory}: {exc.strerror}"
        ) from exc
    return directory / "ha.db"


def default_url() -> str:
    """The URL of the default file (see ``default_path``)."""
    return "sqlite://" + quote(str(default_path()))


def parse_url(url: str, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The file's path and the options of ``url``, keywords ``options`` winning."""
    parsed = OPTIONS.parse(url, scheme="sqlite", usage="sqlite:///PATH")
    if parsed.netloc not in ("", "localhost"):
        raise ConfigurationError(
            f"{url!r}: a sqlite URL names a file of this host by its absolute path:"
            " sqlite:///path/to/ha.db (three slashes)"
        )
    return parsed.path or str(default_path()), {**parsed.options, **OPTIONS.keywords(options)}


@dataclass(frozen=True, slots=True)
class Settings:
    """Checked settings (``check``): the renewer can renew, and the poller polls, in time."""

    path: str
    session_timeout: float
    poll_interval: float
    renew_interval: float  # default: a third of the session timeout
    busy_timeout: float  # how long a write waits for the lock; default: a quarter
    synchronous: str  # "FULL" or "NORMAL" (SQLite's PRAGMA synchronous)

    @classmethod
    def check(
        cls,
        path: str | os.PathLike[str],
        *,
        session_timeout: float = 2.0,
        poll_interval: float = 0.1,
        renew_interval: float | None = None,
        busy_timeout: float | None = None,
        synchronous: str = "full",
    ) -> Settings:
        file = os.fspath(path)
        if not os.path.isabs(file):
            raise ConfigurationError(f"the sqlite file path must be absolute: {file!r}")
        session_timeout = seconds("session_timeout", session_timeout)
        poll_interval = seconds("poll_interval", poll_interval)
        if renew_interval is None:
            renew_interval = session_timeout / 3
        if busy_timeout is None:
            busy_timeout = session_timeout / 4
        renew_interval = seconds("renew_interval", renew_interval)
        busy_timeout = seconds("busy_timeout", busy_timeout)
        # as client-go does: refuse timings that cannot keep the lease alive
        if renew_interval + busy_timeout >= session_timeout:
            raise ConfigurationError(
                f"renew_interval ({renew_interval}) + busy_timeout ({busy_timeout}) must be"
                f" shorter than session_timeout ({session_timeout})"
            )
        if poll_interval >= session_timeout:
            raise ConfigurationError(
                f"poll_interval ({poll_interval}) must be shorter than session_timeout"
                f" ({session_timeout})"
            )
        if not isinstance(synchronous, str) or synchronous.lower() not in ("full", "normal"):
            raise ConfigurationError(f"synchronous must be 'full' or 'normal': {synchronous!r}")
        return cls(
            file, session_timeout, poll_interval, renew_interval, busy_timeout, synchronous.upper()
        )
