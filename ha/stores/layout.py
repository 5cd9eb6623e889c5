"""Where each store keeps its nodes under a cluster's root (the layout is drawn in ``__init__``)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..drivers.base import validate_path
from ..errors import ConfigurationError

__all__ = ("STORE_DIRS", "Layout", "check_name")

# one node name: what job ids, component names and namespaces may be
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,199}")

# the subtrees the stores own; close_and_cleanup_all_data removes exactly these
STORE_DIRS = ("job-results", "running-jobs", "execution-plans", "checkpoints", "state")


def check_name(what: str, name: str) -> str:
    """``name`` if it can be one path segment (and one file name), else ConfigurationError."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ConfigurationError(
            f"{what} must be 1-200 characters of letters, digits, '_', '.', '-', "
            f"not starting with '.' or '-': {name!r}"
        )
    return name


@dataclass(frozen=True, slots=True)
class Layout:
    """The paths of one cluster's stores: ``<prefix>/<cluster_id>/...``."""

    cluster_id: str
    prefix: str = "/ha"

    def __post_init__(self) -> None:
        check_name("cluster_id", self.cluster_id)
        validate_path(self.prefix)

    @property
    def root(self) -> str:
        return f"{self.prefix.rstrip('/')}/{self.cluster_id}"

    @property
    def job_results(self) -> str:
        return f"{self.root}/job-results"

    @property
    def running_jobs(self) -> str:
        return f"{self.root}/running-jobs"

    @property
    def execution_plans(self) -> str:
        return f"{self.root}/execution-plans"

    def checkpoints(self, job_id: str) -> str:
        return f"{self.root}/checkpoints/{check_name('job_id', job_id)}"

    def completed_checkpoints(self, job_id: str) -> str:
        return f"{self.checkpoints(job_id)}/completed"

    def checkpoint_counter(self, job_id: str) -> str:
        return f"{self.checkpoints(job_id)}/counter"

    def state(self, namespace: str) -> str:
        return f"{self.root}/state/{check_name('namespace', namespace)}"

    def store_dirs(self) -> list[str]:
        return [f"{self.root}/{name}" for name in STORE_DIRS]
