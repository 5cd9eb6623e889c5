"""Operating an election from outside it, on any backend: status, format, graceful failover.

The election at ``PATH`` is the elector's nodes plus two kept by ``ha run`` (all drawn, with
their paths and the elector's encodings, in ``ha/election/nodes.py``)::

    PATH/n/TICKET_SEQ  ephemeral, one per contender in the queue; the lowest leads, and its
                       creation order is the leader's epoch   (the elector)
    PATH/b/TICKET      each contender's breadcrumb; one whose node is gone is a crashed
                       contender's, fenced by the next leader (the elector)
    PATH/members/ID    ephemeral, one per running member: its state, host and pid
    PATH/failover      the last graceful failover request (JSON)

The records of these nodes, their codec and the members' side of them are
``ha/membership/``'s (re-exported here: ``Member``, ``FailoverRequest``, ``claim_member``...).
One module per idea:

    status.py      ElectionStatus: one consistent reading of all the nodes (the queue in
                   order, the leftover breadcrumbs), and a watch
    leases.py      other sessions' leases (last renewal, expiry), for status to show
    format.py      format_election (``ha format``)
    failover.py    the graceful failover protocol (``ha failover``) and its waits
    pause.py       maintenance mode (``ha pause``, ``ha resume``): nobody takes the lead
    elections.py   every election under a prefix (``ha status PREFIX``)

``ha history`` reads the history the leaders append (``ha/election/history.py``).
"""

from __future__ import annotations

from ..membership.members import (
    DuplicateIdentity,
    claim_member,
    member_path,
    remove_member,
    write_member,
)
from ..membership.records import DEFAULT_COOLDOWN, FailoverRequest, Member, Pause, text
from ..membership.requests import FailoverError, read_failover, take_failover
from .elections import find_elections, is_election
from .failover import NoActive, confirm_failover, request_failover, wait_for_failover
from .format import ElectionInUse, FormatResult, format_election
from .pause import Paused, PauseRefused, pause_election, read_pause, resume_election
from .status import Contender, ElectionStatus, Leftover, election_status, watch_status

__all__ = (
    "DEFAULT_COOLDOWN",
    "Contender",
    "DuplicateIdentity",
    "ElectionInUse",
    "ElectionStatus",
    "FailoverError",
    "FailoverRequest",
    "FormatResult",
    "Leftover",
    "Member",
    "NoActive",
    "Pause",
    "PauseRefused",
    "Paused",
    "claim_member",
    "confirm_failover",
    "election_status",
    "find_elections",
    "is_election",
    "pause_election",
    "read_pause",
    "resume_election",
    "format_election",
    "member_path",
    "read_failover",
    "remove_member",
    "request_failover",
    "take_failover",
    "text",
    "wait_for_failover",
    "watch_status",
    "write_member",
)
