"""The node-operation rules, once: what fails an op, and with which error (``ha.drivers.base``
says what each op raises). Pure: a driver that decides ops in Python (memory's cluster, the
Kubernetes tree, etcd's plan, sqlite's rows) reads the node's state its own way and asks here.

- a create fails with NodeExists on a node that exists; with NoNode (the parent's path) when
  its parent is missing, or it is the root; with NoNode when its parent is ephemeral (as in
  ZooKeeper: the child would outlive its parent's session);
- a check, set or delete fails with NoNode on a missing node, BadVersion when a version other
  than -1 is not the node's;
- a delete fails with NotEmpty on a node with children;
- in a transaction, the first op that fails fails it all (``TransactionFailed``, its index).
"""

from __future__ import annotations

from ..errors import BadVersion, NodeExists, NoNode, NotEmpty
from .base import parent_of

__all__ = ("NODE_ERRORS", "check_create", "check_empty", "check_version")

# the errors of the rules below: an op's, which a transaction reports with its index
NODE_ERRORS = (NodeExists, NoNode, BadVersion, NotEmpty)


def check_create(path: str, *, exists: bool, parent: bool, parent_ephemeral: bool) -> None:
    """A create at ``path``, given whether a node is there, whether its parent is, and
    whether that parent is ephemeral."""
    if exists:
        raise NodeExists(path)
    if path == "/" or not parent:
        raise NoNode(parent_of(path))
    if parent_ephemeral:
        raise NoNode(f"{path} (ephemeral nodes cannot have children)")


def check_version(path: str, version: int, actual: int | None) -> None:
    """A check, set or delete of ``path`` at ``version`` (-1: any), given the node's version
    (None: no node)."""
    if actual is None:
        raise NoNode(path)
    if version != -1 and version != actual:
        raise BadVersion(path, version, actual)


def check_empty(path: str, *, children: bool) -> None:
    """A delete of ``path``, given whether it has children."""
    if children:
        raise NotEmpty(path)
