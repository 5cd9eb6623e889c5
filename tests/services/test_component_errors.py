"""Per-component error callbacks (Flink's ``handleError``): an error of the HA services on one
component's behalf reaches that component's ``on_error``, not only the log, and no other one's.

Errors are injected through the real API: a foreign node under a component's leader node (its
publication cannot replace it), and ``ha.testing.faults``. Every test runs under asyncio and
trio, on memory, sqlite and ZooKeeper.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from ha.errors import ConfigurationError, CorruptData, NoNode, NotEmpty
from ha.services import ComponentError, LeaderInfo
from tests.support.services import Comp, _until, process, wait_for

pytestmark = pytest.mark.anyio

BACKENDS = ["memory", "sqlite", "zookeeper"]


class Told(Comp):
    """A component that keeps every error it is told."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.errors: list[ComponentError] = []

    def on_error(self, error: ComponentError) -> None:
        self.errors.append(error)


@pytest.fixture(params=BACKENDS)
def some_backend(request: pytest.FixtureRequest) -> Any:
    return request.getfixturevalue(f"{request.param}_backend")


async def test_a_publication_error_reaches_the_component_that_owns_it(some_backend: Any) -> None:
    log: list[tuple[str, str]] = []
    async with process(some_backend, "a") as (a, _), process(some_backend, "b") as (_, other):
        path = f"{a.layout.root}/leader/dispatcher"
        # a foreign node under the dispatcher's leader node: the publication cannot replace it
        await other.create(f"{path}/stray", b"", makepath=True)
        blocked = Told("a/dispatcher", log, address="a:1")
        blocked.election = a.leader_election("dispatcher")
        fine = Told("a/rest", log, address="a:2")
        fine.election = a.leader_election("rest")
        await blocked.election.start(blocked)
        await fine.election.start(fine)
        # told at the confirm, and at each of the services' own retries: the correction task
        # may try (and report) before the confirm's own write returns, so in either order
        actions = ("publish the address", "correct the published address")
        await wait_for(lambda: set(actions) <= {e.action for e in blocked.errors})
        first = next(e for e in blocked.errors if e.action == actions[0])  # confirm_leadership
        retried = next(e for e in blocked.errors if e.action == actions[1])
        for error in (first, retried):
            assert error.component == "dispatcher"
            assert isinstance(error.cause, NotEmpty) and error.cause is error.__cause__
            assert not error.transient
            assert str(error).startswith("dispatcher: ") and path in str(error)
        # the node cleared, a retry publishes the address
        await other.delete(f"{path}/stray")
        await until_holds(other, path, "a:1")
        # the other component was never told anything, and published its address
        assert fine.errors == []
        await until_holds(other, f"{a.layout.root}/leader/rest", "a:2")


async def until_holds(driver: Any, path: str, address: str) -> None:
    """Wait until ``path`` holds ``address`` (the grant may have been renewed meanwhile)."""

    async def holds() -> bool:
        try:
            return LeaderInfo.decode(path, (await driver.get(path))[0]).address == address
        except (NoNode, CorruptData):  # not there yet, or still the stray's empty parent
            return False

    await _until(holds)


async def test_a_failing_grant_is_told_to_its_component(some_backend: Any) -> None:
    log: list[tuple[str, str]] = []

    class Broken(Told):
        async def grant_leadership(self, session_id: uuid.UUID) -> None:
            await super().grant_leadership(session_id)
            raise RuntimeError("cannot start")

    async with process(some_backend, "a") as (a, _):
        broken = Broken("a/broken", log)
        await a.leader_election("broken").start(broken)
        await wait_for(lambda: bool(broken.errors))
        (error,) = broken.errors
        assert error.action == "grant_leadership" and isinstance(error.cause, RuntimeError)
        assert str(error) == "broken: grant_leadership failed: cannot start"


async def test_an_async_on_error_is_refused(some_backend: Any) -> None:
    class Async(Comp):
        async def on_error(self, error: ComponentError) -> None: ...

    async with process(some_backend, "a") as (a, _):
        with pytest.raises(ConfigurationError, match="on_error must be a plain function"):
            await a.leader_election("x").start(Async("a/x", []))
