"""The ZooKeeper driver's settings: its URL, the servers' addresses and the options.

``zk://[USER:PASSWORD@]HOST:PORT[,HOST:PORT...][/CHROOT][?OPTION=VALUE&...]``; options go in
the query string or as keywords (which win).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from ...errors import ConfigurationError
from .._options import OptionTable
from ..base import validate_path

__all__ = ("OPTIONS", "Options", "check_chroot", "check_options", "parse_hosts", "parse_url")


@dataclass(frozen=True, slots=True)
class Options:
    session_timeout: float = 10.0
    connect_timeout: float = 10.0
    op_timeout: float | None = None  # default: the session timeout
    tick_time: float | None = None  # the ensemble's tickTime; default: session timeout / 5
    acl: str = "open"  # or "creator": only the authenticated creator may touch the node
    auth: str | None = None  # "user:password" (digest)
    create_chroot: bool = True
    randomize_hosts: bool = True
    use_ssl: bool = False
    certfile: str | None = None
    keyfile: str | None = None
    keyfile_password: str | None = None
    ca: str | None = None
    verify_certs: bool = True
    check_hostname: bool = False


OPTIONS = OptionTable(
    "ZooKeeper",
    seconds=("session_timeout", "connect_timeout", "op_timeout", "tick_time"),
    flags=("create_chroot", "randomize_hosts", "use_ssl", "verify_certs", "check_hostname"),
    text=("acl", "auth", "certfile", "keyfile", "keyfile_password", "ca"),
)


def parse_url(url: str, options: dict[str, Any]) -> tuple[str, str, dict[str, Any]]:
    """The servers, the chroot and the options of ``url``, keywords ``options`` winning."""
    parsed = OPTIONS.parse(url, scheme="zk", usage="zk://HOST:PORT[/CHROOT]")
    netloc, query = parsed.netloc, {}
    if "@" in netloc:
        userinfo, netloc = netloc.rsplit("@", 1)
        query["auth"] = unquote(userinfo)
    return netloc, parsed.path, {**query, **parsed.options, **options}


def parse_hosts(netloc: str) -> str:
    """Validate ``h1:2181,h2:2181`` (port defaults to 2181; IPv6 in brackets)."""
    if not netloc:
        raise ConfigurationError("no ZooKeeper servers given (expected zk://HOST:PORT,...)")
    hosts = []
    for item in netloc.split(","):
        host, port = item.strip(), "2181"
        if host.startswith("["):
            end = host.find("]")
            if end < 0 or (len(host) > end + 1 and host[end + 1] != ":"):
                raise ConfigurationError(f"malformed IPv6 server address {item!r}")
            if len(host) > end + 1:
                port = host[end + 2 :]
            host = host[: end + 1]
        elif ":" in host:
            host, port = host.rsplit(":", 1)
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigurationError(f"malformed ZooKeeper server address {item!r} (HOST:PORT)")
        hosts.append(f"{host}:{int(port)}")
    return ",".join(hosts)


def check_chroot(chroot: str) -> str:
    """The chroot without its trailing slash ("" for none), if it is a node path."""
    chroot = chroot.rstrip("/")
    if chroot:
        validate_path(chroot)
    return chroot


def check_options(options: dict[str, Any]) -> Options:
    """The ``Options`` of keywords (URL text converted), if they make sense together."""
    opts = Options(**OPTIONS.keywords(options))
    if opts.acl not in ("open", "creator"):
        raise ConfigurationError(f"acl must be 'open' or 'creator', got {opts.acl!r}")
    if opts.auth is not None and ":" not in opts.auth:
        raise ConfigurationError("auth must be USER:PASSWORD (ZooKeeper digest)")
    if opts.acl == "creator" and opts.auth is None:
        raise ConfigurationError("acl=creator needs credentials: give auth=USER:PASSWORD")
    return opts
