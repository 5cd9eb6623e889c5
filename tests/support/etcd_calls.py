"""The calls an etcd driver sends, counted at the server: its transactions, and what it sent
at start."""

from __future__ import annotations

import re
import urllib.request
from collections.abc import Awaitable, Callable

import anyio

from ha.drivers.etcd import EtcdDriver
from tests.support.backends.etcd import EtcdBackend


def transactions(backend: EtcdBackend) -> int:
    """How many Txn requests the server has answered so far."""
    url = f"http://127.0.0.1:{backend.server.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=5) as reply:
        text = reply.read().decode()
    found = re.findall(r'grpc_server_handled_total\{[^}]*grpc_method="Txn"[^}]*\} (\d+)', text)
    return sum(int(count) for count in found)


async def sent_at_start(
    backend: EtcdBackend, call: Callable[[EtcdDriver, int], Awaitable[object]], count: int
) -> int:
    """The transactions that ``count`` calls ``call(driver, number)``, made at once right
    after the driver's start, took (no checkpoint in between: its senders have not run yet)."""
    driver = backend.driver()
    await driver.start()
    try:
        before = transactions(backend)
        async with anyio.create_task_group() as tg:
            for number in range(count):
                tg.start_soon(call, driver, number)
        return transactions(backend) - before
    finally:
        await driver.aclose()
