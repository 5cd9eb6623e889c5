"""A contender on etcd's own server-side election API (v3election) through the JSON gateway.

The server does the election: ``/v3/election/campaign`` blocks until this contender's key (the
election name + "/" + its lease, in hex) is the oldest, ``/v3/election/resign`` deletes it. A
session is a lease of ``--session-timeout`` seconds kept alive every third of it, as etcd's Go
``concurrency.Session`` does. Plain ``http.client`` (one connection per thread): the contender
costs what the protocol costs, not what an HTTP library does.
"""

from __future__ import annotations

import base64
import http.client
import json
import math
import os
import sys
import threading
from typing import Any

sys.path.insert(
    0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "peers_zookeeper")
)

from protocol import arguments, release_requested, say  # noqa: E402


class Gateway:
    def __init__(self, hosts: str) -> None:
        host, port = hosts.split(",")[0].rsplit(":", 1)
        self.connection = http.client.HTTPConnection(host, int(port))

    def call(self, method: str, body: dict[str, Any]) -> dict[str, Any]:
        self.connection.request("POST", f"/v3/{method}", json.dumps(body))
        reply: dict[str, Any] = json.loads(self.connection.getresponse().read())
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply}")
        return reply


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def keep_alive(hosts: str, lease: str, every: float, stop: threading.Event) -> None:
    gateway = Gateway(hosts)
    while not stop.wait(every):
        gateway.call("lease/keepalive", {"ID": lease})


def main() -> None:
    args = arguments()
    release = release_requested()
    gateway = Gateway(args.hosts)
    ttl = max(1, math.ceil(args.session_timeout))
    lease = str(gateway.call("lease/grant", {"TTL": ttl})["ID"])
    stop = threading.Event()
    threading.Thread(
        target=keep_alive, args=(args.hosts, lease, ttl / 3, stop), daemon=True
    ).start()
    say("JOINED")
    body = {"name": b64(args.path), "lease": lease, "value": b64(args.id)}
    leader = gateway.call("election/campaign", body)["leader"]
    say("LEADER")
    release.wait()
    say("RELEASING")
    gateway.call("election/resign", {"leader": leader})
    stop.set()


if __name__ == "__main__":
    main()
