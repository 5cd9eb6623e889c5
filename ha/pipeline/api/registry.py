"""Pipelines registered by name, and the validation of their parameters.

A pipeline is two functions: one lists its batches for given parameters (input files, file
groups, partitions: any JSON value), the other computes one batch's output DataFrame::

    @pipeline("clicks.sessionize", batches=list_days,
              params={"input": Param(str), "gap_seconds": Param(int, 1800)},
              sort_by=("user_id", "session_start"))
    def sessionize(spark, params, batch):
        return spark.read.parquet(batch)...

The batch list is computed once, at submission, and stored in the job's execution plan: a new
leader resumes the very same list even if the input directory changed meanwhile. ``compute``
must be deterministic (same batch, same rows), which is what makes a redone batch harmless.

Registered pipelines come from: the modules shipped here, the modules a job manager is told to
import, and the ``ha.pipelines`` entry point group of installed packages.
"""

from __future__ import annotations

import importlib
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any

from ...errors import ConfigurationError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = (
    "REQUIRED",
    "Param",
    "Pipeline",
    "get_pipeline",
    "import_pipelines",
    "pipeline",
    "pipeline_names",
    "register",
    "unregister",
)

ENTRY_POINT_GROUP = "ha.pipelines"
# Modules of this package that register pipelines; imported on the first lookup.
BUILTIN_MODULES = ("ha.pipeline.examples.clicks", "ha.pipeline.examples.events", "ha.report")
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")

Compute = Callable[["SparkSession", Mapping[str, Any], Any], "DataFrame"]
ListBatches = Callable[[Mapping[str, Any]], Sequence[Any]]
Validate = Callable[[Mapping[str, Any]], None]


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()
_PARAM_TYPES = (str, int, float, bool)


@dataclass(frozen=True, slots=True)
class Param:
    """One parameter: its type (str, int, float or bool), default and help text."""

    type: type = str
    default: Any = REQUIRED
    help: str = ""

    def __post_init__(self) -> None:
        if self.type not in _PARAM_TYPES:
            raise ConfigurationError(
                f"parameter type must be str, int, float or bool, not {self.type}"
            )

    @property
    def required(self) -> bool:
        return self.default is REQUIRED

    def coerce(self, name: str, value: Any) -> Any:
        """Check ``value``; strings (from a command line) are converted to the declared type."""
        kind = self.type
        if isinstance(value, str) and kind is not str:
            try:
                if kind is bool:
                    lowered = value.lower()
                    if lowered not in ("true", "false", "1", "0", "yes", "no"):
                        raise ValueError(value)
                    return lowered in ("true", "1", "yes")
                return kind(value)
            except ValueError:
                raise ConfigurationError(
                    f"parameter {name!r} must be {kind.__name__}, got {value!r}"
                ) from None
        # bool is an int in Python; a flag given where a count is expected is a mistake.
        ok = isinstance(value, kind) and not (kind is not bool and isinstance(value, bool))
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            return float(value)
        if not ok:
            raise ConfigurationError(
                f"parameter {name!r} must be {kind.__name__}, got {type(value).__name__} {value!r}"
            )
        return value


@dataclass(frozen=True, slots=True)
class Pipeline:
    """A registered pipeline. Calling it computes one batch (handy in tests)."""

    name: str
    compute: Compute
    list_batches: ListBatches
    params: Mapping[str, Param] = field(default_factory=dict)
    # Columns that order a batch's rows; with ``files_per_batch`` they fix the output bytes.
    sort_by: tuple[str, ...] | None = None
    files_per_batch: int = 1
    description: str = ""
    validate: Validate | None = None
    # A streaming pipeline's source and trigger (``streaming.StreamSpec``); None for batches.
    stream: Any = None

    def __call__(self, spark: SparkSession, params: Mapping[str, Any], batch: Any) -> DataFrame:
        return self.compute(spark, params, batch)

    def check_params(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        """Complete defaults and check types; unknown or missing names are refused."""
        if not isinstance(raw, Mapping):
            raise ConfigurationError(f"parameters must be a mapping, got {type(raw).__name__}")
        unknown = sorted(set(raw) - set(self.params))
        if unknown:
            known = ", ".join(sorted(self.params)) or "none"
            raise ConfigurationError(
                f"pipeline {self.name!r} has no parameter {', '.join(map(repr, unknown))} "
                f"(its parameters: {known})"
            )
        checked: dict[str, Any] = {}
        for name, spec in self.params.items():
            if name in raw:
                checked[name] = spec.coerce(name, raw[name])
            elif spec.required:
                raise ConfigurationError(
                    f"pipeline {self.name!r} needs parameter {name!r}"
                    + (f" ({spec.help})" if spec.help else "")
                )
            else:
                checked[name] = spec.default
        if self.validate is not None:
            try:
                self.validate(checked)
            except ConfigurationError:
                raise
            except (ValueError, TypeError) as exc:
                raise ConfigurationError(f"pipeline {self.name!r}: {exc}") from exc
        return checked

    def plan_batches(self, params: Mapping[str, Any]) -> list[Any]:
        """The batch list for checked ``params``: JSON values, at least one."""
        try:
            batches = list(self.list_batches(params))
        except ConfigurationError:
            raise
        except (OSError, ValueError, TypeError) as exc:
            raise ConfigurationError(
                f"pipeline {self.name!r} cannot list its batches: {exc}"
            ) from exc
        if not batches:
            raise ConfigurationError(f"pipeline {self.name!r} has no batches for {dict(params)}")
        try:
            json.dumps(batches, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise ConfigurationError(
                f"pipeline {self.name!r}: batches must be JSON values (they are stored in the plan): {exc}"
            ) from exc
        return batches


_registry: dict[str, Pipeline] = {}
_loaded_builtins = False


def register(p: Pipeline, *, replace: bool = False) -> Pipeline:
    """Add ``p``; a different pipeline already under that name is refused unless ``replace``."""
    if not NAME_RE.match(p.name):
        raise ConfigurationError(
            f"bad pipeline name {p.name!r}: letters, digits, '_', '.', '-' (at most 128)"
        )
    if p.files_per_batch < 1:
        raise ConfigurationError(f"pipeline {p.name!r}: files_per_batch must be at least 1")
    old = _registry.get(p.name)
    if old is not None and not replace and not _same_function(old.compute, p.compute):
        raise ConfigurationError(
            f"pipeline {p.name!r} is already registered by {_where(old.compute)}"
        )
    _registry[p.name] = p
    return p


def unregister(name: str) -> None:
    _registry.pop(name, None)


def pipeline(
    name: str,
    *,
    batches: ListBatches,
    params: Mapping[str, Param] | None = None,
    sort_by: Sequence[str] | None = None,
    files_per_batch: int = 1,
    description: str | None = None,
    validate: Validate | None = None,
    replace: bool = False,
    stream: Any = None,
) -> Callable[[Compute], Pipeline]:
    """Decorator registering ``compute(spark, params, batch) -> DataFrame`` under ``name``
    (``stream``: see ``streaming.streaming_pipeline``)."""

    def decorate(compute: Compute) -> Pipeline:
        doc = (compute.__doc__ or "").strip().splitlines()
        return register(
            Pipeline(
                name=name,
                compute=compute,
                list_batches=batches,
                params=dict(params or {}),
                sort_by=tuple(sort_by) if sort_by is not None else None,
                files_per_batch=files_per_batch,
                description=description if description is not None else (doc[0] if doc else ""),
                validate=validate,
                stream=stream,
            ),
            replace=replace,
        )

    return decorate


def import_pipelines(modules: Iterable[str]) -> None:
    """Import modules that register pipelines (a job manager's ``--import`` list)."""
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise ConfigurationError(f"cannot import pipeline module {module!r}: {exc}") from exc


def _load_builtins() -> None:
    global _loaded_builtins
    if _loaded_builtins:
        return
    _loaded_builtins = True
    import_pipelines(BUILTIN_MODULES)
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            ep.load()
        except Exception as exc:  # one broken plugin must not hide the others
            raise ConfigurationError(
                f"pipeline entry point {ep.name!r} ({ep.value}) failed to load: {exc}"
            ) from exc


def get_pipeline(name: str) -> Pipeline:
    _load_builtins()
    try:
        return _registry[name]
    except KeyError:
        known = ", ".join(sorted(_registry)) or "none"
        raise ConfigurationError(f"unknown pipeline {name!r}; registered: {known}") from None


def pipeline_names() -> list[str]:
    _load_builtins()
    return sorted(_registry)


def _where(fn: Callable[..., Any]) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', '?')}"


def _same_function(a: Callable[..., Any], b: Callable[..., Any]) -> bool:
    # A module imported twice (e.g. as a script and as a module) registers again: allow it.
    return _where(a) == _where(b)
