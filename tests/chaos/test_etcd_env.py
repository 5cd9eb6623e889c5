"""The etcd chaos backend's bookkeeping, without a cluster: which acts a slow revoke excuses."""

from __future__ import annotations

from typing import Any

from tests.chaos.etcd_env import revoke_window
from tests.chaos.procs import SESSION
from tests.support.witness import verdict


def _act(identity: str, epoch: int, at: float) -> dict[str, Any]:
    pid = {"b": 2, "c": 3}[identity]
    act = f"{identity}/{pid}/{at:.2f}"
    return dict(kind="act", act=act, identity=identity, pid=pid, epoch=epoch, begin=at, end=at)


def test_a_revoke_answered_late_excuses_the_acts_after_it_landed() -> None:
    # seed 10106: the revoke of b's lease was sent at 0.5 and answered at 5.5 (no raft leader
    # for a while); c took over at 5.2, and b, not told, acted once more at 5.4
    lines = [_act("b", 7, 0.1 * i) for i in range(52)]
    lines += [_act("c", 9, 5.2), _act("c", 9, 5.3), _act("b", 7, 5.4), _act("c", 9, 5.45)]
    window = revoke_window("b", 0.5, 5.5)
    assert verdict(lines, [], expiries=window, window=SESSION) == []
    assert {t for _, t in window} >= {0.5, 5.5}
    # dated by its sending alone, the same revoke leaves b's last act judged
    assert verdict(lines, [], expiries=[("b", 0.5)], window=SESSION) != []


def test_a_prompt_revoke_excuses_one_session() -> None:
    assert revoke_window("b", 3.0, 3.02) == [("b", 3.0), ("b", 3.02)]
