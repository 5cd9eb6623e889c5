"""The faults of the in-process cluster property tests (the memory cluster's network and its
contenders), drawn and applied."""

from __future__ import annotations

import ha
from tests.support.harness import Cluster, MemoryNet, Node, SqliteNet

# faults of the backend, each drawn only where the net supports it (Net.faults)
NET_FAULTS = [
    "crash",
    "expire",
    "disconnect",
    "reconnect",
    "cut_off",
    "restore",
    "freeze",
    "thaw",
    "stall",
    "unstall",
    "transient",
]


# faults of the contender or of the operator: every backend
CONTENDER_FAULTS = ["quit", "quit_fence", "restart", "refuse_fence", "fail_active", "hang_hooks"]


async def apply(c: Cluster, fault: str, node: Node) -> None:
    stalled = isinstance(c.net, SqliteNet) and c.net.stalled
    if fault == "restart":
        # a new process cannot open its session while another holds the write lock
        if node.done.is_set() and not stalled:
            c.nodes.remove(node)
            await c.add(f"{node.name}+", session_timeout=c.net.session_timeout, timing=TIMING)
    elif node.done.is_set():
        return  # a crashed or finished node has nothing left to break
    elif fault == "crash":
        await c.crash(node)
    elif fault == "expire":
        if not stalled:  # expiring needs the write lock too
            await c.expire(node)
    elif fault == "transient":
        c.fail_next(node, 2)
    elif fault in ("quit", "quit_fence"):
        node.quit(need_fence=fault == "quit_fence")
    elif fault == "refuse_fence":
        node.rec.refuse_fence += 1
    elif fault == "fail_active":
        node.rec.fail_active += 1
    elif fault == "hang_hooks":
        node.rec.hang_hooks = not node.rec.hang_hooks
    else:
        await c.fault(fault, node)


async def heal_all(c: Cluster) -> None:
    await c.heal()
    for node in c.nodes:
        node.rec.refuse_fence = node.rec.fail_active = 0


TIMING = ha.Timing(
    backoff=ha.Backoff(initial=0.005, maximum=0.05),
    fence_backoff=ha.Backoff(initial=0.005, maximum=0.05),  # liveness: within the same bound
    hook_timeout=0.2,
    max_retries=50,
)


class FastMemory(MemoryNet):
    session_timeout = 0.2
