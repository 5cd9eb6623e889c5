"""What users supply: a contender, any object with ``become_active`` and optional hooks.

Also how the elector calls the optional hooks: each bounded by its timeout, a hook that raises
or overruns is logged (on ``ha.elector``) and never stops the election; a refused fence is
returned as text for the machine. ``become_active`` is run by ``leadership.py``.
"""

from __future__ import annotations

import inspect
import logging
from typing import Any, Protocol, runtime_checkable

import anyio

from ..errors import ConfigurationError
from .lease import Lease

__all__ = ("Contender", "HOOKS", "call_hook", "check_contender", "fence_old_active")

log = logging.getLogger("ha.elector")

HOOKS = ("become_standby", "enter_neutral", "fence_old_active", "on_fatal_error")


@runtime_checkable
class Contender(Protocol):
    """The service to keep highly available.

    ``become_active(lease)`` is the leader's work. It runs in a cancel scope that is cancelled,
    and awaited, when leadership is lost; if it returns, leadership is kept until lost or quit;
    if it raises, that is a failure to become active (release, back off, rejoin).

    Optional hooks, each bounded by the elector's hook timeout:
    ``become_standby()``, ``enter_neutral()``, ``fence_old_active(breadcrumb: bytes)`` (raise
    to refuse the takeover; return ``False`` when nothing was run, so the takeover is not
    reported as fenced; the bytes are handed over as stored, even when corrupt), and
    ``on_fatal_error(error: Exception)``.
    """

    async def become_active(self, lease: Lease) -> None: ...


def check_contender(contender: object) -> None:
    """Raise ConfigurationError unless ``contender`` has an async ``become_active`` and each
    hook it has is async: the elector awaits them, so a plain ``def`` would fail at every call
    (``become_active`` once per attempt, the election going round in between)."""
    kind = type(contender).__name__
    method = getattr(contender, "become_active", None)
    if not callable(method):
        raise ConfigurationError(f"contender {kind} has no become_active(lease) method")
    for name in ("become_active", *HOOKS):
        hook = getattr(contender, name, None)
        if hook is None:
            continue
        if not callable(hook):
            raise ConfigurationError(f"contender attribute {kind}.{name} is not callable")
        if not _is_async(hook):
            raise ConfigurationError(
                f"contender hook {kind}.{name} must be a coroutine function"
                f" ('async def {name}'), not a plain function"
            )


def _is_async(hook: object) -> bool:
    """``async def`` functions and methods (also through functools.partial), async mocks, and
    objects whose ``__call__`` is ``async def``."""
    return inspect.iscoroutinefunction(hook) or inspect.iscoroutinefunction(type(hook).__call__)


async def call_hook(contender: object, name: str, seconds: float, path: str, *args: Any) -> None:
    """Await ``contender.<name>(*args)`` for at most ``seconds`` if it has that hook; failures
    are logged, not raised."""
    hook = getattr(contender, name, None)
    if hook is None:
        return
    try:
        with anyio.fail_after(seconds):
            await hook(*args)
    except TimeoutError:
        log.error("%s: contender hook %s did not finish in time", path, name)
    except Exception:
        log.exception("%s: contender hook %s raised", path, name)


async def fence_old_active(
    contender: object, breadcrumb: bytes, seconds: float, path: str
) -> tuple[str | None, bool]:
    """Ask the contender to fence the old active: (the refusal or None, whether a fence ran).

    A hook that returns ``False`` says it had nothing to run (``ha run`` without ``--fence``):
    the takeover then relies on the epoch alone, as with no hook, and is not called fenced."""
    hook = getattr(contender, "fence_old_active", None)
    if hook is None:
        log.info("%s: no fence_old_active hook; relying on epoch fencing", path)
        return None, False
    try:
        with anyio.fail_after(seconds):
            ran = await hook(breadcrumb)
    except TimeoutError:
        return f"fence_old_active took over {seconds:g}s", True
    except Exception as exc:
        return repr(exc), True
    return None, ran is not False
