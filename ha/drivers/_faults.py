"""The two faults every driver injects alike: a gate that holds its requests, and errors queued
for its next requests.

Each driver keeps its own hook methods (their names are what ``ha.testing.faults`` calls, and
their docstrings say what a request is on that backend); they hand over to one ``Injected``.
"""

from __future__ import annotations

import anyio

from ..errors import AccessDenied, ConnectionLost, HAError

__all__ = ("Injected",)


class Injected:
    """A driver's freeze/thaw gate and its queue of injected errors."""

    __slots__ = ("_errors", "_frozen")

    def __init__(self) -> None:
        self._frozen: anyio.Event | None = None
        self._errors: list[HAError] = []

    def freeze(self) -> None:
        if self._frozen is None:
            self._frozen = anyio.Event()

    def thaw(self) -> None:
        if self._frozen is not None:
            self._frozen.set()
            self._frozen = None

    async def wait_thawed(self) -> None:
        """Return once no freeze holds requests (at once if none does)."""
        while self._frozen is not None:
            await self._frozen.wait()

    def fail_next(
        self,
        count: int,
        *,
        transient: bool,
        lost: str = "injected fault",
        denied: str = "injected fatal fault",
    ) -> None:
        """The next ``count`` requests raise ConnectionLost(lost), or AccessDenied(denied) if
        not transient."""
        for _ in range(count):
            self._errors.append(ConnectionLost(lost) if transient else AccessDenied(denied))

    def raise_next(self) -> None:
        """Raise the first error still queued, if any."""
        if self._errors:
            raise self._errors.pop(0)
