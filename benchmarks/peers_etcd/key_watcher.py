"""A bystander for ``etcd_server_part.py --watchers``: one watch on every key of etcd, through
the JSON gateway, each message read and decoded, nothing else.

It wakes on every write as a standby of ``ha`` does (its driver's watch covers the whole
prefix, so every contender of an election is sent the leader's leave), and so puts beside the
election API the same number of processes woken by a handover's write.

    key_watcher.py HOST:PORT
"""

from __future__ import annotations

import base64
import http.client
import json
import sys


def main() -> None:
    host, _, port = sys.argv[1].rpartition(":")
    connection = http.client.HTTPConnection(host, int(port))
    everything = base64.b64encode(b"\0").decode()  # from the first key, range_end \0: all keys
    body = {"create_request": {"key": everything, "range_end": everything}}
    connection.request("POST", "/v3/watch", json.dumps(body))
    response = connection.getresponse()
    while line := response.readline():
        json.loads(line)


if __name__ == "__main__":
    main()
