"""The steps of a handover inside ``ha``, dated for ``handover_share.py --steps``.

``install()`` wraps a few of ``ha``'s methods (those of the tree ``ha`` is imported from; a
method a tree lacks is left out) so that each call is dated on CLOCK_MONOTONIC as it begins
(``>``) and as it returns (``<``): ``STEPS`` holds ``(label, ns)``. The first time each
label shows after a moment is what ``handover_share.py`` reads (the old leader's steps after
its quit, the successor's after the event's bytes were read). Each wrapper costs about a
microsecond, so the steps' sum is a little over the plain trace's.

Labels, in the order of a handover: the old leader's ``quit`` (``Elector.quit``), ``loop``
(the elector's loop has the input), ``machine`` (``Machine.handle``), ``stop`` (the term
stopped: ``Leadership.stop``), ``report`` (``Reporting.send``), ``leave`` (``ElectionNodes``'
exit transaction), ``driver`` (the driver's ``transaction``), ``ops`` (etcd's operations),
``batcher`` (etcd's write batcher), ``gateway`` (etcd's request), ``http`` (the request's
bytes go to the stream); the successor's ``deliver`` (etcd's watch hands a message's events
out), ``event`` (a queue watch's callback), ``inbox`` (the input queued for the elector's
loop), ``loop``, ``machine``, ``start`` (``Leadership.start``: the term's task spawned),
``report``, ``announce`` (the wait for the term's task to begin) and ``term`` (the term's
task runs). (``inbox`` shows on the old leader too: the quit's input.)
"""

from __future__ import annotations

import functools
import inspect
import time
from typing import Any

STEPS: list[tuple[str, int]] = []


def _wrap(owner: Any, name: str, label: str, *, until: bool = True) -> None:
    method = getattr(owner, name, None)
    if method is None:
        return
    clock, steps = time.monotonic_ns, STEPS
    wrapped: Any
    if inspect.iscoroutinefunction(method):

        async def wrapped(*args: Any, **kwargs: Any) -> Any:
            steps.append((label + ">", clock()))
            result = await method(*args, **kwargs)
            if until:
                steps.append((label + "<", clock()))
            return result
    else:

        def wrapped(*args: Any, **kwargs: Any) -> Any:
            steps.append((label + ">", clock()))
            result = method(*args, **kwargs)
            if until:
                steps.append((label + "<", clock()))
            return result

    setattr(owner, name, functools.wraps(method)(wrapped))


def install(backend: str) -> None:
    from ha.election.elector import Elector
    from ha.election.inbox import Inbox
    from ha.election.leadership import Leadership
    from ha.election.machine import Machine
    from ha.election.nodes import ElectionNodes
    from ha.election.reporting import Reporting
    from ha.election.watching import QueueWatches

    _wrap(Elector, "quit", "quit")
    _wrap(Elector, "_next_input", "loop")
    _wrap(Machine, "handle", "machine")
    _wrap(Leadership, "stop", "stop")
    _wrap(Leadership, "start", "start")
    _wrap(Leadership, "begun", "announce")
    _wrap(Leadership, "_lead", "term", until=False)
    _wrap(Reporting, "send", "report")
    _wrap(Inbox, "put", "inbox")
    _wrap(ElectionNodes, "_exit", "leave", until=False)
    _wrap(QueueWatches, "_on_crumb", "event", until=False)
    _wrap(QueueWatches, "_on_node", "event", until=False)
    if backend == "zk":
        from ha.drivers.zookeeper.driver import ZooKeeperDriver

        _wrap(ZooKeeperDriver, "transaction", "driver", until=False)
    else:
        from ha.drivers.etcd.driver import EtcdDriver
        from ha.drivers.etcd.gateway import Gateway
        from ha.drivers.etcd.http import Connection
        from ha.drivers.etcd.operations import Operations
        from ha.drivers.etcd.watches import Watches
        from ha.drivers.etcd.writes import WriteBatcher

        _wrap(EtcdDriver, "transaction", "driver", until=False)
        _wrap(WriteBatcher, "write", "batcher", until=False)
        _wrap(Gateway, "call", "gateway", until=False)
        _wrap(Operations, "transaction", "ops", until=False)
        _wrap(Connection, "send", "http", until=False)
        _wrap(Watches, "_deliver", "deliver")
