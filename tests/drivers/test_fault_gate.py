"""Test faults stay out of production paths: a driver no test armed never calls into its
``FaultGate`` (``ha/drivers/_faults.py``), through node operations, watches, renewals and a
close; once a test arms it, its requests pass through the gate.

Every backend with a transport of its own (sqlite, zookeeper, etcd, kubernetes), under
asyncio and trio. The memory driver simulates its client, faults included: its operations
read its fault state by design (``MemoryDriver._call``).
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from ha.drivers._faults import FaultGate
from ha.drivers.base import Create, Delete, NodeEvent, SetData
from ha.errors import ConnectionLost
from ha.testing import faults

pytestmark = pytest.mark.anyio

TIMEOUT = 1.0
GATED = ("admit", "passage", "stream", "thawed", "raise_queued")  # what gated requests call


@pytest.fixture
def gate_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the FaultGate methods called on a request path, in order."""
    calls: list[str] = []
    for name in GATED:
        real = getattr(FaultGate, name)

        def spy(self: FaultGate, *args: Any, _real: Any = real, _name: str = name) -> Any:
            calls.append(_name)
            return _real(self, *args)

        monkeypatch.setattr(FaultGate, name, spy)
    return calls


async def test_an_unarmed_driver_never_calls_into_its_fault_gate(
    backend: Any, gate_calls: list[str]
) -> None:
    if backend.name == "memory":
        pytest.skip("the memory driver simulates its client: its faults are part of the model")
    events: list[NodeEvent] = []
    async with backend.driver(session_timeout=TIMEOUT) as driver:
        driver.subscribe("/g", events.append)
        await driver.create("/g", b"1")
        await driver.set("/g", b"2")
        await driver.get("/g")
        await driver.children("/")
        await driver.transaction([Create("/g/c"), SetData("/g", b"3"), Delete("/g/c")])
        await driver.delete("/g")
        with anyio.fail_after(10):
            while not events or events[-1].kind.name != "DELETED":
                await anyio.sleep(0.01)
        await anyio.sleep(TIMEOUT)  # renewals and watch loops go round meanwhile
        assert gate_calls == []

        faults(driver).fail_next(1)  # armed now: requests pass through the gate
        with pytest.raises(ConnectionLost, match="injected"):
            await driver.get("/")
        assert gate_calls, "an armed driver's requests pass through its gate"
        assert await driver.exists("/") is not None
