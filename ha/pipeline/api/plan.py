"""A job's execution plan: what the active job manager needs to run (or resume) a job.

The plan is checked in full at submission, so a malformed job is refused with a clear message
there and never reaches a job manager: the pipeline must be registered, its parameters valid,
its batch list non-empty, the output a new or empty local directory.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ...errors import ConfigurationError, CorruptData
from .registry import get_pipeline

__all__ = ("JobPlan", "make_plan", "output_path", "parse_params")

JOB_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
PLAN_VERSION = 1


@dataclass(frozen=True, slots=True)
class JobPlan:
    job_id: str
    pipeline: str
    params: Mapping[str, Any]
    batches: tuple[Any, ...]
    output: str
    max_attempts: int = 3
    submitted_at: float = field(default=0.0, compare=False)

    def to_bytes(self) -> bytes:
        return json.dumps(
            {
                "version": PLAN_VERSION,
                "job_id": self.job_id,
                "pipeline": self.pipeline,
                "params": dict(self.params),
                "batches": list(self.batches),
                "output": self.output,
                "max_attempts": self.max_attempts,
                "submitted_at": self.submitted_at,
            },
            sort_keys=True,
            separators=(",", ":"),
        ).encode()

    @classmethod
    def from_bytes(cls, data: bytes, where: str = "execution plan") -> JobPlan:
        """Decode a stored plan; anything unexpected raises CorruptData naming ``where``."""
        try:
            raw = json.loads(data)
            if raw.get("version") != PLAN_VERSION:
                raise ValueError(f"unknown plan version {raw.get('version')!r}")
            return cls(
                job_id=_typed(raw, "job_id", str),
                pipeline=_typed(raw, "pipeline", str),
                params=_typed(raw, "params", dict),
                batches=tuple(_typed(raw, "batches", list)),
                output=_typed(raw, "output", str),
                max_attempts=_typed(raw, "max_attempts", int),
                submitted_at=float(_typed(raw, "submitted_at", (int, float))),
            )
        except (ValueError, TypeError, AttributeError, UnicodeDecodeError) as exc:
            raise CorruptData(where, str(exc)) from exc

    @property
    def output_dir(self) -> Path:
        return Path(self.output)


def _typed(raw: Mapping[str, Any], key: str, kind: type | tuple[type, ...]) -> Any:
    value = raw[key] if key in raw else None
    if not isinstance(value, kind) or isinstance(value, bool):
        raise ValueError(f"field {key!r} is {value!r}")
    return value


def output_path(output: str) -> Path:
    """The local directory named by ``output`` (a path or a ``file://`` URI), made absolute.

    Commits rely on POSIX rename, so only local (or locally mounted, shared) file systems.
    """
    if "://" in output:
        parts = urlsplit(output)
        if parts.scheme != "file" or parts.netloc not in ("", "localhost"):
            raise ConfigurationError(
                f"output must be a local directory or file:// URI, got {output!r} "
                "(commits rename directories atomically, which object stores cannot do)"
            )
        output = parts.path
    if not output:
        raise ConfigurationError("output directory must not be empty")
    return Path(output).expanduser().absolute()


def make_plan(
    pipeline: str,
    params: Mapping[str, Any],
    output: str,
    *,
    job_id: str | None = None,
    max_attempts: int = 3,
) -> JobPlan:
    """Check a submission and build its plan; raise ConfigurationError saying what is wrong."""
    spec = get_pipeline(pipeline)
    if job_id is None:
        job_id = f"{pipeline}-{uuid.uuid4().hex[:10]}"
    if not JOB_ID_RE.match(job_id):
        raise ConfigurationError(
            f"bad job id {job_id!r}: letters, digits, '_', '.', '-' (at most 128)"
        )
    if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1:
        raise ConfigurationError(f"max_attempts must be a positive integer, got {max_attempts!r}")
    checked = spec.check_params(params)
    out = output_path(output)
    if out.exists():
        if not out.is_dir():
            raise ConfigurationError(f"output {out} exists and is not a directory")
        # Batch directories are named by index only: a second job there would mix outputs.
        if any(out.iterdir()):
            raise ConfigurationError(f"output {out} is not empty; use a new or empty directory")
    batches = spec.plan_batches(checked)
    return JobPlan(
        job_id=job_id,
        pipeline=pipeline,
        params=checked,
        batches=tuple(batches),
        output=str(out),
        max_attempts=max_attempts,
        submitted_at=time.time(),
    )


def parse_params(items: list[str] | tuple[str, ...]) -> dict[str, str]:
    """``["gap_seconds=900", "input=/data"]`` (command-line ``-p`` options) as a mapping; the
    values stay strings, which ``make_plan`` converts to each parameter's declared type."""
    params: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise ConfigurationError(f"expected NAME=VALUE, got {item!r}")
        if name.strip() in params:
            raise ConfigurationError(f"parameter {name.strip()!r} given twice")
        params[name.strip()] = value
    return params
