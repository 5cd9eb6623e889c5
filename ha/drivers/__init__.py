"""Drivers, chosen by URL scheme: ``ha.connect("zk://127.0.0.1:2181/ha")``.

Each scheme maps to ``module:Class``; the module is imported only when used, so a backend's
client library is needed only by those who use it.
"""

from __future__ import annotations

import importlib
from typing import Any
from urllib.parse import urlsplit

from .._install import install_hint
from ..errors import ConfigurationError
from .base import Driver

__all__ = ("SCHEMES", "connect", "driver_class")

# scheme -> (module, class, the extra that installs its client library or None)
SCHEMES: dict[str, tuple[str, str, str | None]] = {
    "memory": ("ha.drivers.memory", "MemoryDriver", None),
    "sqlite": ("ha.drivers.sqlite", "SqliteDriver", None),
    "zk": ("ha.drivers.zookeeper", "ZooKeeperDriver", "zookeeper"),
    "etcd": ("ha.drivers.etcd", "EtcdDriver", "etcd"),
    "k8s": ("ha.drivers.kubernetes", "KubernetesDriver", "kubernetes"),
}


def driver_class(url: str) -> type[Driver]:
    if not isinstance(url, str) or "://" not in url:
        raise ConfigurationError(
            f"not a backend URL: {url!r} (expected SCHEME://..., schemes: {', '.join(SCHEMES)})"
        )
    scheme = urlsplit(url).scheme
    try:
        module_name, class_name, extra = SCHEMES[scheme]
    except KeyError:
        raise ConfigurationError(
            f"unknown backend scheme {scheme!r} in {url!r}; known schemes: {', '.join(SCHEMES)}"
        ) from None
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        hint = f": {install_hint(extra)}" if extra else ""
        raise ConfigurationError(f"the {scheme}:// backend is not available ({exc}){hint}") from exc
    cls: type[Driver] = getattr(module, class_name)
    return cls


def connect(url: str, **options: Any) -> Driver:
    """Build the driver for ``url``; use it as ``async with ha.connect(url) as driver``."""
    return driver_class(url).from_url(url, **options)
