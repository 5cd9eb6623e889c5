"""Counters, gauges and histograms, and their Prometheus text exposition (format 0.0.4).

Our own small equivalent of ``prometheus_client`` rather than that library: everything here is
touched from one event loop thread, so no metric needs a lock, and a scrape is one synchronous
``render()`` that an anyio server (asyncio or trio) can call between two requests. There is no
global registry: each ``ha run`` or job manager process makes one ``Registry`` and hands it to
what it measures, so tests can build as many as they like.

Recording is a dict lookup and an addition (``metric.labels(...).inc()``); nothing is formatted
or written until a scrape. Gauges whose value lives elsewhere (an elector's state, the age of
the last contact with the backend) are read at scrape time through ``set_function``.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Generic, TypeVar

__all__ = ("LATENCY_BUCKETS", "Counter", "Gauge", "Histogram", "Metric", "Registry")

# seconds: from a local backend round trip (sub-millisecond) to a session timeout (tens of s)
LATENCY_BUCKETS = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0,
)  # fmt: skip

Labels = tuple[str, ...]
C = TypeVar("C")  # what one set of label values holds: a value, or a histogram's buckets
M = TypeVar("M", bound="Metric[Any]")


def _number(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _label_text(names: Sequence[str], values: Sequence[str]) -> str:
    if not names:
        return ""
    pairs = ",".join(f'{n}="{_escape_label(v)}"' for n, v in zip(names, values, strict=True))
    return "{" + pairs + "}"


class Metric(Generic[C]):
    """A family of samples with one name, one help text and fixed label names; ``labels()``
    gives what one set of label values holds, made on first use."""

    kind = "untyped"

    def __init__(self, name: str, help: str, labelnames: Sequence[str] = ()) -> None:
        if not name.replace("_", "a").isalnum() or name[0].isdigit():
            raise ValueError(f"bad metric name {name!r}")
        self.name = name
        self.help = help
        self.labelnames = tuple(labelnames)
        self._children: dict[Labels, C] = {}

    def _key(self, labels: dict[str, str]) -> Labels:
        if set(labels) != set(self.labelnames):
            raise ValueError(f"{self.name} takes labels {self.labelnames}, got {tuple(labels)}")
        return tuple(str(labels[n]) for n in self.labelnames)

    def _make(self) -> C:
        raise NotImplementedError

    def labels(self, **labels: str) -> C:
        key = self._key(labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = self._make()
        return child

    def samples(self) -> Iterator[tuple[str, Sequence[str], Sequence[str], float]]:
        """(suffixed name, label names, label values, value) of each sample."""
        raise NotImplementedError

    def render(self) -> str:
        help_text = self.help.replace("\\", "\\\\").replace("\n", "\\n")
        lines = [f"# HELP {self.name} {help_text}", f"# TYPE {self.name} {self.kind}"]
        for name, names, values, value in self.samples():
            lines.append(f"{name}{_label_text(names, values)} {_number(value)}")
        return "\n".join(lines) + "\n"


class _Value:
    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, amount: float = 1.0) -> None:
        self.value += amount

    def set(self, value: float) -> None:
        self.value = float(value)


class Counter(Metric[_Value]):
    """Only goes up. Name it ``..._total``."""

    kind = "counter"

    def __init__(self, name: str, help: str, labelnames: Sequence[str] = ()) -> None:
        if not name.endswith("_total"):
            raise ValueError(f"a counter's name ends in _total: {name!r}")
        super().__init__(name, help, labelnames)

    def _make(self) -> _Value:
        return _Value()

    def samples(self) -> Iterator[tuple[str, Sequence[str], Sequence[str], float]]:
        for key, child in sorted(self._children.items()):
            yield self.name, self.labelnames, key, child.value


class Gauge(Metric[_Value]):
    """A value that goes up and down, set now or read at scrape time (``set_function``)."""

    kind = "gauge"

    def __init__(self, name: str, help: str, labelnames: Sequence[str] = ()) -> None:
        super().__init__(name, help, labelnames)
        self._functions: dict[Labels, Callable[[], float | None]] = {}

    def _make(self) -> _Value:
        return _Value()

    def set_function(self, read: Callable[[], float | None], **labels: str) -> None:
        """Read the value from ``read()`` at each scrape (None: no sample). Replaces the one
        set before for the same labels, as a new elector of the same identity replaces the
        last one."""
        self._functions[self._key(labels)] = read

    def remove(self, **labels: str) -> None:
        key = self._key(labels)
        self._children.pop(key, None)
        self._functions.pop(key, None)

    def samples(self) -> Iterator[tuple[str, Sequence[str], Sequence[str], float]]:
        values = {key: child.value for key, child in self._children.items()}
        for key, read in self._functions.items():
            value = read()
            if value is None:
                values.pop(key, None)
            else:
                values[key] = float(value)
        for key, value in sorted(values.items()):
            yield self.name, self.labelnames, key, value


class _Buckets:
    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last one: above every bound (+Inf)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value


class Histogram(Metric[_Buckets]):
    """Observations counted into buckets (cumulative ``le`` buckets at render time)."""

    kind = "histogram"

    def __init__(
        self,
        name: str,
        help: str,
        labelnames: Sequence[str] = (),
        buckets: Sequence[float] = LATENCY_BUCKETS,
    ) -> None:
        super().__init__(name, help, labelnames)
        if "le" in self.labelnames:
            raise ValueError("'le' is the histogram's own label")
        self.buckets = tuple(sorted(float(b) for b in buckets if not math.isinf(b)))

    def _make(self) -> _Buckets:
        return _Buckets(self.buckets)

    def samples(self) -> Iterator[tuple[str, Sequence[str], Sequence[str], float]]:
        names = (*self.labelnames, "le")
        for key, child in sorted(self._children.items()):
            total = 0
            for bound, count in zip((*self.buckets, math.inf), child.counts, strict=True):
                total += count
                yield f"{self.name}_bucket", names, (*key, _number(bound)), total
            yield f"{self.name}_count", self.labelnames, key, total
            yield f"{self.name}_sum", self.labelnames, key, child.sum


class Registry:
    """The metrics of one process, rendered together for a scrape."""

    CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

    def __init__(self) -> None:
        self._metrics: dict[str, Metric[Any]] = {}

    def add(self, metric: M) -> M:
        """Register ``metric``; a metric of the same name, kind and labels already there is
        returned instead, so that two users of one registry share it."""
        found = self._metrics.setdefault(metric.name, metric)  # of M's type: checked below
        if type(found) is not type(metric) or found.labelnames != metric.labelnames:
            raise ValueError(f"metric {metric.name} already registered differently")
        return found

    def counter(self, name: str, help: str, labelnames: Sequence[str] = ()) -> Counter:
        return self.add(Counter(name, help, labelnames))

    def gauge(self, name: str, help: str, labelnames: Sequence[str] = ()) -> Gauge:
        return self.add(Gauge(name, help, labelnames))

    def histogram(
        self,
        name: str,
        help: str,
        labelnames: Sequence[str] = (),
        buckets: Sequence[float] = LATENCY_BUCKETS,
    ) -> Histogram:
        return self.add(Histogram(name, help, labelnames, buckets))

    def render(self) -> str:
        """Every metric in the text format, by name."""
        return "".join(self._metrics[name].render() for name in sorted(self._metrics))
