"""The ZooKeeper backend on kazoo: ``zk://h1:2181,h2:2181/chroot?session_timeout=5``.

Where things are: ``driver`` (``ZooKeeperDriver``: a facade that owns the parts below; the
node operations; security), ``session`` (kazoo's threads and the loop, the client's
lifecycle, the session states, the fault gate), ``contact`` (dating ``last_contact`` by the
leader's view: replies through the leader, the sync probe, ``tick_time``), ``watches`` (node
events from re-armed one-shot watches), ``mapping`` (kazoo's errors, stats and transaction
results in ha's terms), ``settings`` (the URL and the options), ``faults`` (the test faults
behind ``ha.testing.faults``).
"""

from __future__ import annotations

from .driver import ZooKeeperDriver
from .mapping import map_errors

__all__ = ("ZooKeeperDriver", "map_errors")
