"""The Kubernetes driver's settings: its URL and options.

``k8s://NAMESPACE/NAME[?OPTION=VALUE&...]``; options go in the query string or as keywords
(which win). ``NAME`` names the driver's objects in ``NAMESPACE``: the ConfigMap ``NAME-ha``
holding the tree, and one Lease ``NAME-ha-s-<session>`` per session. ``k8s:///NAME`` takes the
namespace of the kubeconfig's context, or of the pod's service account, else ``default``.

Where the API server is and how to authenticate comes from ``config``: the ``kubeconfig``
option, else the ``KUBECONFIG`` variable, else the pod's service account (in a cluster), else
``~/.kube/config``; ``context`` picks a kubeconfig context other than its current one.

A Lease counts its duration in whole seconds: a session timeout is rounded up. ``op_timeout``
bounds each request (default: half the session timeout).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from ...errors import ConfigurationError
from .._options import OptionTable

__all__ = ("OPTIONS", "Options", "Settings", "check_name", "parse_url")

# DNS-1123 label: what a namespace must be, and our NAME (it is also a label value, <= 63)
_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
MAX_NAME = 63 - len("-ha-s-") - 16  # room for the session Leases' names as label values


@dataclass(frozen=True, slots=True)
class Options:
    session_timeout: float = 10.0
    connect_timeout: float = 10.0
    op_timeout: float | None = None  # default: half the session timeout
    context: str | None = None  # a kubeconfig context other than its current one
    kubeconfig: str | None = None  # a kubeconfig file, instead of $KUBECONFIG and the rest
    pod: str | None = None  # this process's pod: labelled with its role (``announce.py``)


OPTIONS = OptionTable(
    "Kubernetes",
    seconds=("session_timeout", "connect_timeout", "op_timeout"),
    text=("context", "kubeconfig", "pod"),
)


def check_name(what: str, value: str, longest: int = 63) -> str:
    if len(value) > longest or not _LABEL.fullmatch(value):
        raise ConfigurationError(
            f"Kubernetes {what} {value!r} must be lowercase letters, digits and '-', starting"
            f" and ending with a letter or digit, at most {longest} characters"
        )
    return value


@dataclass(frozen=True, slots=True)
class Settings:
    """Checked settings: the namespace (None: from the configuration), the name, the options."""

    namespace: str | None
    name: str
    options: Options

    @property
    def lease_seconds(self) -> int:
        """The session timeout as a Lease holds it: whole seconds, at least 1."""
        return max(1, math.ceil(self.options.session_timeout))

    @property
    def op_timeout(self) -> float:
        return self.options.op_timeout or self.lease_seconds / 2

    @property
    def tree(self) -> str:
        """The name of the ConfigMap holding the nodes."""
        return f"{self.name}-ha"

    def lease(self, session: int) -> str:
        """The name of a session's Lease."""
        return f"{self.name}-ha-s-{session:016x}"

    @classmethod
    def check(cls, namespace: str | None, name: str, **options: Any) -> Settings:
        opts = Options(**OPTIONS.keywords(options))
        if namespace:
            check_name("namespace", namespace)
        check_name("name", name, MAX_NAME)
        return cls(namespace or None, name, opts)


def parse_url(url: str, options: dict[str, Any]) -> tuple[str, str, dict[str, Any]]:
    """The namespace, the name and the options of ``url``, keywords ``options`` winning."""
    usage = "k8s://NAMESPACE/NAME"
    parsed = OPTIONS.parse(url, scheme="k8s", usage=usage)
    name = parsed.path.strip("/")
    if not name or "/" in name:
        raise ConfigurationError(f"expected {usage} (one name after the namespace), got {url!r}")
    return parsed.netloc, name, {**parsed.options, **options}
