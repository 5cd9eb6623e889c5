"""The publication's decision, with no event loop: which transaction makes the leader node
hold our address, for each thing a look at the node can find."""

from __future__ import annotations

from ha.drivers.base import Check, Create, Delete, SetData, Stat
from ha.services.publication import Found, plan

LOCK = Check("/ha/c/election/lock", 3)
PATH = "/ha/c/leader/dispatcher"
DATA = b'{"address": "a:1"}'
US, THEM = 11, 22


def test_without_a_look_it_creates_under_an_existing_parent() -> None:
    assert plan(LOCK, PATH, DATA, US, None) == [LOCK, Create(PATH, DATA, ephemeral=True)]


def test_no_node_creates_it_with_its_missing_parents() -> None:
    parents = (Create("/ha/c/leader", b""),)
    found = Found(None, parents=parents)
    assert plan(LOCK, PATH, DATA, US, found) == [LOCK, *parents, Create(PATH, DATA, ephemeral=True)]


def test_our_node_with_our_address_needs_nothing() -> None:
    assert plan(LOCK, PATH, DATA, US, Found(Stat(4, US), DATA)) is None


def test_our_node_with_another_address_is_set_at_its_version() -> None:
    found = Found(Stat(4, US), b"old")
    assert plan(LOCK, PATH, DATA, US, found) == [LOCK, SetData(PATH, DATA, 4)]


def test_another_sessions_node_is_replaced_by_ours() -> None:
    for owner in (THEM, None):  # an old leader's node, or a stray persistent write
        found = Found(Stat(7, owner))
        assert plan(LOCK, PATH, DATA, US, found) == [
            LOCK,
            Delete(PATH, 7),
            Create(PATH, DATA, ephemeral=True),
        ]


def test_every_write_checks_the_election_lock_first() -> None:
    finds = [None, Found(None), Found(Stat(1, US), b"x"), Found(Stat(1, THEM))]
    for found in finds:
        ops = plan(LOCK, PATH, DATA, US, found)
        assert ops is not None and ops[0] == LOCK
        assert isinstance(ops[-1], Create | SetData) and ops[-1].path == PATH
