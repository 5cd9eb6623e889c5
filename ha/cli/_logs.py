"""The command's logs on stderr: ``--log-format text|json`` and ``--log-level``.

Text: ``12:00:00.123 ha.elector message``; the supervisor's lines say ``ha run ID:`` instead of
the logger's name. JSON: one object per line with ``ts`` (UTC, ISO 8601), ``level``,
``logger``, ``message``, the structured fields the library logs with (``election``,
``identity``, ``from_state``, ``to_state``, ``epoch``, ``cause``...) and ``run_as`` for the
supervisor's lines, so a log shipper needs no parsing.

Levels: without ``--log-level``, ha's own loggers show warnings and the supervisor's story
(``ha.supervisor``) shows info; ``--log-level`` sets one level for all of them; ``--debug``
is ``--log-level debug`` with client libraries' logs too. Client libraries (kazoo) log each
failed attempt: below debug their logs are dropped, since our error says it once.
"""

from __future__ import annotations

import datetime
import json
import logging
import sys
from typing import Any

__all__ = ("LOG_FORMATS", "LOG_LEVELS", "run_as", "setup_logging")

LOG_FORMATS = ("text", "json")
LOG_LEVELS = ("debug", "info", "warning", "error")

# what every LogRecord has: anything else was passed as ``extra`` (structured fields)
_STANDARD = frozenset(vars(logging.LogRecord("x", 0, "x", 0, "x", None, None))) | {
    "message",
    "asctime",
    "taskName",
}


class _Text(logging.Formatter):
    """``12:00:00.123 ha.elector message``; the supervisor's lines say ``ha run ID:``."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s.%(msecs)03d %(name)s %(message)s", datefmt="%H:%M:%S")

    def format(self, record: logging.LogRecord) -> str:
        if record.name == "ha.supervisor" and _run_as:
            record = logging.makeLogRecord(vars(record))  # other handlers see the original
            record.name = f"ha run {_run_as}:"
        return super().format(record)


class _Json(logging.Formatter):
    """One JSON object per record, with the record's structured fields."""

    def format(self, record: logging.LogRecord) -> str:
        ts = datetime.datetime.fromtimestamp(record.created, datetime.UTC)
        document: dict[str, Any] = {
            "ts": ts.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.name == "ha.supervisor" and _run_as:
            document["run_as"] = _run_as
        for key, value in vars(record).items():
            if key not in _STANDARD and key not in document:
                document[key] = value
        if record.exc_info:
            document["traceback"] = self.formatException(record.exc_info)
        return json.dumps(document, default=str)


_run_as = ""


def run_as(identity: str) -> None:
    """The supervisor's log lines name ``identity`` from now on (``ha run`` and job managers)."""
    global _run_as
    _run_as = identity


def setup_logging(debug: bool, level: str | None = None, log_format: str = "text") -> None:
    """Send ha's logs to stderr in ``log_format`` at ``level`` (None: the default levels)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_Json() if log_format == "json" else _Text())
    if debug:
        level = "debug"
    ours = logging.getLogger("ha")
    ours.handlers[:] = [handler]
    ours.propagate = False
    supervisor = logging.getLogger("ha.supervisor")
    if level is None:
        ours.setLevel(logging.WARNING)
        supervisor.setLevel(logging.INFO)
    else:
        ours.setLevel(level.upper())
        supervisor.setLevel(logging.NOTSET)  # as ha's
    other = logging.getLogger()
    other.handlers[:] = [handler if level == "debug" else logging.NullHandler()]
    other.setLevel(logging.DEBUG if level == "debug" else logging.WARNING)
