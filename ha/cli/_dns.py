"""Fail on DNS at once: a ZooKeeper URL none of whose hosts resolves is one error line.

kazoo retries an unresolvable host until the connect timeout (10 s by default) and then says
only that it could not reach the servers. A name that does not resolve will not start to
while the command waits, so the command looks the names up first. Any host that resolves, or
a lookup that is merely slow, lets the connection go on as before: the driver decides then.
"""

from __future__ import annotations

import socket
from urllib.parse import urlsplit

import anyio
import anyio.to_thread

from ..drivers import driver_class
from ..errors import ConfigurationError

__all__ = ("check_hosts_resolve",)

LOOKUP_TIME = 5.0  # seconds; a slower resolver is left to the driver's own connect timeout


def _host(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


async def check_hosts_resolve(url: str) -> None:
    """Raise ``ConfigurationError`` when ``url`` is a ZooKeeper URL none of whose hosts
    resolves; otherwise return (at once for other backends)."""
    if urlsplit(url).scheme != "zk":
        return
    driver_class(url)  # kazoo missing: the one line that says what to install, raised here
    from ..drivers.zookeeper.settings import parse_hosts, parse_url

    hosts = [_host(a) for a in parse_hosts(parse_url(url, {})[0]).split(",")]
    failures: list[str] = []
    with anyio.move_on_after(LOOKUP_TIME):
        for host, port in hosts:
            try:
                await anyio.to_thread.run_sync(
                    socket.getaddrinfo, host, port, 0, socket.SOCK_STREAM, abandon_on_cancel=True
                )
            except socket.gaierror as exc:
                failures.append(f"{host} ({exc.strerror or exc})")
            else:
                return
        names = ", ".join(failures)
        noun = "host" if len(failures) == 1 else "hosts"
        raise ConfigurationError(f"cannot resolve the ZooKeeper {noun} {names}: check the URL")
