"""One GET to `ha run --http` or the services' endpoints, and `ha run` supervisors with --http on
ports of their choosing."""

from __future__ import annotations

import re
import sys
import urllib.error
import urllib.request
from typing import Any

import anyio

from tests.support.cli import Supervisors, popen_ha, wait_until
from tests.support.metrics import parse

SLEEP = (sys.executable, "-c", "import time; time.sleep(600)")


def http_get(port: int, path: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


class Hosts(Supervisors):
    """Supervisors of /svc, each with --http on a port of its choosing (read from its log)."""

    def start(self, name: str, *extra: str) -> None:
        log = self.directory / f"{name}.log"
        self.procs[name] = popen_ha(
            "run", "/svc", "--id", name, "--http", "127.0.0.1:0", *extra, "--", *SLEEP,
            env=self.env, log=log,
        )  # fmt: skip

    def log(self, name: str) -> str:
        return (self.directory / f"{name}.log").read_text(errors="replace")

    def port(self, name: str) -> int:
        found = wait_until(
            lambda: re.search(r"http on 127\.0\.0\.1:(\d+)", self.log(name)), f"{name}'s http"
        )
        return int(found.group(1))

    def ready(self, name: str) -> bool:
        return http_get(self.port(name), "/readyz")[0] == 200

    def metrics(self, name: str) -> Any:
        status, body = http_get(self.port(name), "/metrics")
        assert status == 200
        return parse(body.decode())


async def request(address: tuple[str, int], raw: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send ``raw``, read the whole answer (the server closes): status, headers, body."""
    async with await anyio.connect_tcp(*address) as stream:
        await stream.send(raw)
        data = b""
        while True:
            try:
                data += await stream.receive()
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                break
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:])
    if not raw.startswith(b"HEAD"):  # HEAD: the length of GET's body, which is not sent
        assert int(headers["Content-Length"]) == len(body)
    return int(lines[0].split()[1]), headers, body


async def get(address: tuple[str, int], path: str) -> tuple[int, dict[str, str], bytes]:
    return await request(address, f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
