"""The etcd driver's settings: its URL, the cluster's endpoints and the options.

``etcd://[USER:PASSWORD@]HOST:PORT[,HOST:PORT...][/PREFIX][?OPTION=VALUE&...]``; options go in
the query string or as keywords (which win). ``PREFIX`` is the driver's namespace: every key
it writes starts with it, as a ZooKeeper chroot.

etcd counts a lease's TTL in whole seconds: a session timeout is asked for rounded up, and the
server may grant more (its minimum is 1.5 election timeouts); the driver then uses the granted
one. ``op_timeout`` bounds each request (default: half the session timeout, so that an answer
that is not coming is given up while the session may still live).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

from ...errors import ConfigurationError
from .._options import OptionTable
from ..base import validate_path

__all__ = ("OPTIONS", "Options", "Settings", "parse_endpoints", "parse_url")

DEFAULT_PORT = 2379


@dataclass(frozen=True, slots=True)
class Options:
    session_timeout: float = 10.0
    connect_timeout: float = 10.0
    op_timeout: float | None = None  # default: half the session timeout
    user: str | None = None
    password: str | None = None
    tls: bool = False  # https to every endpoint (implied by ca or cert)
    ca: str | None = None  # a CA bundle to verify the servers with
    cert: str | None = None  # a client certificate (PEM) ...
    key: str | None = None  # ... and its key, if not in the same file


OPTIONS = OptionTable(
    "etcd",
    seconds=("session_timeout", "connect_timeout", "op_timeout"),
    flags=("tls",),
    text=("user", "password", "ca", "cert", "key"),
)


@dataclass(frozen=True, slots=True)
class Settings:
    """Checked settings: where the cluster is, the driver's prefix, and the options."""

    endpoints: tuple[str, ...]  # base URLs: http://HOST:PORT
    prefix: str  # "" or "/name..." without a trailing slash
    options: Options

    @property
    def op_timeout(self) -> float:
        return self.options.op_timeout or self.options.session_timeout / 2

    @property
    def secure(self) -> bool:
        opts = self.options
        return opts.tls or opts.ca is not None or opts.cert is not None

    @property
    def where(self) -> str:
        """The endpoints as a user wrote them, for messages."""
        return ",".join(e.split("://", 1)[1] for e in self.endpoints)

    @classmethod
    def check(cls, hosts: str, prefix: str = "", **options: Any) -> Settings:
        opts = Options(**OPTIONS.keywords(options))
        if (opts.user is None) != (opts.password is None):
            raise ConfigurationError("etcd credentials need both user and password")
        if opts.key is not None and opts.cert is None:
            raise ConfigurationError("the etcd option key needs cert (the client certificate)")
        prefix = prefix.rstrip("/")
        if prefix:
            validate_path(prefix)
        scheme = "https" if opts.tls or opts.ca or opts.cert else "http"
        return cls(tuple(f"{scheme}://{h}" for h in parse_endpoints(hosts)), prefix, opts)


def parse_url(url: str, options: dict[str, Any]) -> tuple[str, str, dict[str, Any]]:
    """The endpoints, the prefix and the options of ``url``, keywords ``options`` winning."""
    parsed = OPTIONS.parse(url, scheme="etcd", usage="etcd://HOST:PORT[,HOST:PORT...][/PREFIX]")
    netloc, query = parsed.netloc, {}
    if "@" in netloc:
        userinfo, netloc = netloc.rsplit("@", 1)
        user, sep, password = userinfo.partition(":")
        if not sep or not user:
            raise ConfigurationError("etcd credentials in a URL are USER:PASSWORD@HOST")
        query = {"user": unquote(user), "password": unquote(password)}
    return netloc, parsed.path, {**query, **parsed.options, **options}


def parse_endpoints(netloc: str) -> list[str]:
    """``h1:2379,h2`` as ``HOST:PORT`` items (port 2379 by default; IPv6 in brackets)."""
    if not netloc:
        raise ConfigurationError("no etcd endpoints given (expected etcd://HOST:PORT,...)")
    hosts = []
    for item in netloc.split(","):
        try:  # urllib knows brackets and ports; an address is a netloc of its own
            parts = urlsplit("//" + item.strip())
            host, port, rest = parts.hostname, parts.port, parts.path + parts.query
        except ValueError:
            host = None
        if not host or port == 0 or rest or "@" in item:
            raise ConfigurationError(f"malformed etcd endpoint {item!r} (HOST:PORT)")
        host = f"[{host}]" if ":" in host else host
        hosts.append(f"{host}:{port or DEFAULT_PORT}")
    return hosts
