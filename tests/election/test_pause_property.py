"""Hypothesis on a memory cluster with pause and resume among the faults (ha/election/machine.py,
P16): ``check_history`` (the verdict from outside the electors: one active per epoch, fence
before act, stop before handover) holds whatever the order of pauses, resumes, crashes, expiries
and quits; once every fault is healed and the election resumed, one elector leads again; and an
elector that had seen the pause before its leader went never started a term while paused.

The faults and their application are the cluster property test's (test_cluster_property.py).
"""

from __future__ import annotations

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ha.admin import pause_election, resume_election
from ha.election.machine import Phase
from tests.support.cluster_faults import (
    CONTENDER_FAULTS,
    NET_FAULTS,
    TIMING,
    FastMemory,
    apply,
    heal_all,
)
from tests.support.harness import cluster, wait_for

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(300)]

PATH = "/svc"  # the harness's election
# 3 per anyio backend by default (the suite's time budget); 100 with --hypothesis-profile=long
EXAMPLES = max(1, settings.default.max_examples // 30)
OPERATOR = ["pause", "resume"]
Step = tuple[str, int, float]


def plans() -> st.SearchStrategy[list[Step]]:
    faults = [f for f in NET_FAULTS if f in FastMemory.faults] + CONTENDER_FAULTS
    pauses = [0.0, 0.01, 0.05, 0.25]
    # pause and resume drawn as often as all the faults together
    steps = st.one_of(st.sampled_from(faults), st.sampled_from(OPERATOR))
    return st.lists(
        st.tuples(steps, st.integers(0, 4), st.sampled_from(pauses)), min_size=1, max_size=10
    )


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(size=st.integers(2, 4), plan=plans())
async def test_pause_and_resume_among_faults(size: int, plan: list[Step]) -> None:
    net = FastMemory()
    async with cluster(net) as c:
        for i in range(size):
            await c.add(f"n{i}", session_timeout=net.session_timeout, timing=TIMING)
        probe = await c.stack.enter_async_context(c.probe())
        await wait_for(lambda: any(n.elector._machine.node for n in c.nodes), 10)
        held: dict[str, int] = {}  # elector seen PAUSED since the last resume -> its terms
        for step, index, wait in plan:
            if step == "pause":
                await pause_election(probe, PATH)
            elif step == "resume":
                await resume_election(probe, PATH)
                held.clear()
            else:
                await apply(c, step, c.nodes[index % len(c.nodes)])
            await anyio.sleep(wait)
            for node in c.live():
                if node.elector._machine.phase is Phase.PAUSED:
                    held.setdefault(node.name, len(node.rec.leases))
                if node.name in held:  # it saw the pause: no new term until a resume
                    assert len(node.rec.leases) == held[node.name], (node.name, plan)
        await heal_all(c)
        await resume_election(probe, PATH)
        quitting = [n for n in c.nodes if n.quitting]
        await wait_for(lambda: all(n.done.is_set() for n in quitting), within=10.0)
        if not c.live():
            await c.add("fresh", session_timeout=net.session_timeout, timing=TIMING)
        await wait_for(c.settled, within=10.0)  # liveness once resumed
