"""Taking part in an election as a member: what ``ha run`` and the services share.

A member is a contender that publishes itself and honours failover requests: an ``ha run``
supervisor, or a services process opened with ``members=True``. Below ``ha/admin/`` (which
reads these nodes from outside) and above ``ha/election/`` (whose paths they use); both
``ha/supervisor/`` and ``ha/services/`` build on it. One module per idea:

    records.py     Member, FailoverRequest and Pause: the records beside the elector's nodes,
                   and their one JSON codec
    members.py     the member nodes: claim, write, remove, list (a duplicate identity refused)
    requests.py    the failover request: read (once, for everyone), taken by a ceding active
    rules.py       pure: whether a member may take part (health, cooldown), and how it
                   honours a request (``Eligibility``)
    follow.py      the two loops beside a member's elector: its member node kept current, the
                   requests read and handed to the rules
    handback.py    the preferred leader: who the active hands the lead back to (pure), and
                   the loop that asks for it (``ha run --priority``)
"""

from __future__ import annotations

__all__ = ()
