"""Hypothesis on a cluster: 3 to 5 electors on the memory backend under random faults.

After each run the recorded history is checked for every safety property of ARCHITECTURE.md
(``ha.testing.check_history``: one active per epoch, increasing epochs, fence before act, stop
before handover, legal transitions), and liveness: once every fault is healed, one elector is
ACTIVE and the others STANDBY. ``--hypothesis-profile=long`` runs thousands of examples.
"""

from __future__ import annotations

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ha
from tests.harness import Cluster, Node, cluster, wait_for

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(900)]



# The example count comes from the profile: Hypothesis' default, 100 per anyio backend (200 in
# all); ``--hypothesis-profile=long`` (registered in conftest.py) runs 3000 per backend.

FAULTS = [
    "crash",
    "expire",
    "disconnect",
    "reconnect",
    "partition",
    "heal",
    "freeze",
    "thaw",
    "quit",
    "quit_fence",
    "restart",
    "transient",
    "refuse_fence",
    "fail_active",
    "hang_hooks",
]

steps = st.lists(
    st.tuples(
        st.sampled_from(FAULTS),
        st.integers(0, 4),
        st.sampled_from([0.0, 0.0, 0.01, 0.05, 0.25]),
    ),
    max_size=8,
)


async def apply(c: Cluster, fault: str, node: Node) -> None:
    d = node.driver
    if fault == "crash":
        c.crash(node)
    elif fault == "expire":
        c.history.add(node.name, "expire")
        d.expire()
    elif fault == "disconnect":
        d.disconnect()
    elif fault == "reconnect":
        d.reconnect()
    elif fault == "partition":
        d.partition()
    elif fault == "heal":
        d.heal()
    elif fault == "freeze":
        d.freeze()
    elif fault == "thaw":
        d.thaw()
    elif fault in ("quit", "quit_fence"):
        node.elector.quit(need_fence=fault == "quit_fence")
    elif fault == "restart" and node.done.is_set():
        c.nodes.remove(node)
        await c.add(f"{node.name}+")
    elif fault == "transient":
        d.fail_next(2)
    elif fault == "refuse_fence":
        node.rec.refuse_fence += 1
    elif fault == "fail_active":
        node.rec.fail_active += 1
    elif fault == "hang_hooks":
        node.rec.hang_hooks = not node.rec.hang_hooks


def heal_all(c: Cluster) -> None:
    for node in c.nodes:
        node.driver.heal()
        node.driver.reconnect()
        node.driver.thaw()
        node.rec.refuse_fence = node.rec.fail_active = 0


@settings(
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(size=st.integers(3, 5), plan=steps)
async def test_safety_and_liveness_under_faults(
    size: int, plan: list[tuple[str, int, float]]
) -> None:
    async with cluster() as c:
        for i in range(size):
            await c.add(
                f"n{i}",
                session_timeout=0.2,
                timing=ha.Timing(
                    backoff=ha.Backoff(initial=0.005, maximum=0.05),
                    hook_timeout=0.2,
                    max_retries=50,
                ),
            )
        for fault, index, pause in plan:
            await apply(c, fault, c.nodes[index % len(c.nodes)])
            await anyio.sleep(pause)
        heal_all(c)
        if all(n.done.is_set() for n in c.nodes):
            await c.add("fresh")
        # liveness: session timeout + backoff, with a wide margin for a loaded machine
        await wait_for(c.settled, within=10.0)
