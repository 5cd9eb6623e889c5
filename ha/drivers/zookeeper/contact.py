"""When the ZooKeeper leader last heard from this session: the driver's ``last_contact``.

Timing: ``session_timeout`` is the timeout the server granted (it may clamp the request to its
``maxSessionTimeout``). ``last_contact`` must never be later than the *leader's* view of the
contact, since only the ZooKeeper leader expires sessions:

- a follower answers reads and pings by itself, and passes its clients' session touches on to
  the leader only in its replies to the leader's pings (every tickTime/2). A follower cut off
  from the leader goes on answering until its sync limit runs out (syncLimit x tickTime, 10 s
  stock), long after the leader may have expired the session. So a reply proves nothing by
  itself. It takes two requests through the leader (``sync``, or a write):
  - the reply to the first, sent at ``t``, came down the leader's link to the follower behind
    the pings the leader sent before it answered, one of them after ``t - tick_time``; the
    follower answered each ping with its touches before it passed the reply on. So a request
    answered before ``t - tick_time`` had its touch sent on to the leader by then;
  - the second, sent after that reply arrived, went up the same ordered link behind those
    touches, and the leader answers it only while the session lives. So the leader took the
    touch while the session lived, and expires it no earlier than a timeout after the touch.
  A single reply is not enough: with the leader's packets to the follower held up (a one-way
  partition, retransmissions after it), the follower forwards requests while it has no ping
  to answer with its touches, and the leader may expire the session before the touches come,
  after it answered the request (netns ZooKeeper seed 3354: the active acted 0.17 s into the
  next leader's term). ``last_contact`` is the send time of the latest request so proven.
  ``tick_time`` (the ensemble's tickTime in seconds; default a fifth of the session timeout,
  which covers stock ZooKeeper's 2 s tick for sessions of 10 s and more) must cover the ping
  interval (tickTime/2) plus the jitter of the leader's pings: give the real tickTime for
  shorter sessions.

  Two limits. Observers served by a follower (``observerMasterPort``, 3.6+) hand their
  touches to that follower, which passes them on at its next ping: a client of such an
  observer is not covered by the argument above (connect contenders to voting members). And
  the leader answers a ``sync`` whose session check failed in the instant between marking
  the session closing and committing its closeSession (a write gets its error instead); the
  closeSession closes the connection before a later reply.
- a (re)connection is dated when kazoo's thread sends the connect request: a follower grants
  it only after the leader has touched (revalidated, or created) the session. The stamp is
  taken on kazoo's thread and converted to the loop's clock, so a stalled loop cannot date it
  late.

A ``sync`` every ``max(tick_time / 4, session_timeout / 24)`` keeps it fresh while nothing
else is asked: each proves what the one before it showed, a request answered a ``tick_time``
before that one was sent, so the contact is at most about ``tick_time`` plus two such intervals
(``1.5 * tick_time``, by default 0.3 session timeouts) plus a few round trips old. (A sync
every half tick dated the contact as freshly from one reply, which was not sound.)
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Awaitable, Callable

import anyio

from ...errors import DriverError

__all__ = ("ContactDating",)


class ContactDating:
    """Dates ``last_contact`` from the requests ZooKeeper answered and the replies that went
    through its leader; a ``sync`` now and then (``probe``) when nothing else does.

    ``timeout()``: the session timeout as granted; ``connected()``: whether the session has
    a connection now; ``sync``: a ``sync`` through the leader, dated as any request."""

    def __init__(
        self,
        tick_time: float | None,
        *,
        timeout: Callable[[], float],
        connected: Callable[[], bool],
        sync: Callable[[], Awaitable[None]],
    ) -> None:
        self._tick_time = tick_time  # the ensemble's tickTime; None: a fifth of the timeout
        self._timeout = timeout
        self._connected = connected
        self._sync = sync
        self.last_contact = -math.inf  # no contact yet
        # requests answered by the server: (sent, replied) on the loop's clock, candidates for
        # last_contact once a reply through the leader proves their touch reached the leader
        self._answered: deque[tuple[float, float]] = deque()
        # what replies through the leader have shown sent on to it: (replied, contact), proven
        # once a request through the leader sent after ``replied`` is answered (module doc)
        self._pending: deque[tuple[float, float]] = deque()
        self._probe_now = anyio.Event()

    def remember(self, sent: float, replied: float) -> None:
        """Keep an answered request until a sync proves it. Replies are remembered in the
        order they came (``replied`` never decreases), so a proof covers the oldest ones.
        Those answered in one slice of a tick (``_grain``) share an entry (latest send,
        latest reply): each is proven at most a slice later, and the queue holds a few
        entries per tick however many requests are answered. Slices, not a cap on entries:
        merging the oldest two at a cap made the merged entry take on ever later replies, so
        with more answers per tick than the cap nothing was ever proven."""
        answered = self._answered
        if answered:
            last_sent, last_replied = answered[-1]
            if replied // self._grain == last_replied // self._grain:
                answered[-1] = (max(sent, last_sent), replied)
                return
        if len(answered) >= 1024:  # no proof for ~1024 slices: keep the memory bounded
            a, b = answered.popleft(), answered.popleft()
            answered.appendleft((max(a[0], b[0]), max(a[1], b[1])))
        answered.append((sent, replied))

    @property
    def renewal_interval(self) -> float:
        """Each sync proves, for the one before it, the latest sync answered a tick before that
        one was sent: as old as the tick rounded up to whole probe intervals, then two more
        intervals until the next proof (module doc)."""
        probe = self.probe_interval
        return math.ceil(self.tick / probe - 1e-9) * probe + 2 * probe

    @property
    def probe_interval(self) -> float:
        return max(self.tick / 4, self._timeout() / 24)

    @property
    def tick(self) -> float:
        """How long before a reply through the leader a request must have been answered for
        that reply to prove its touch reached the leader (see the module's doc)."""
        return self._tick_time or self._timeout() / 5

    @property
    def _grain(self) -> float:
        """Answers within one such slice of reply time share an entry (``remember``)."""
        return self.tick / 8

    def through_leader(self, sent: float, replied: float) -> None:
        """A request sent at ``sent`` went through the leader and was answered at ``replied``:
        it proves what replies before ``sent`` showed sent on, and shows what the next one
        will prove (module doc)."""
        pending, proven = self._pending, None
        while pending and pending[0][0] < sent:  # it left after their replies came
            proven = max(pending.popleft()[1], proven or -math.inf)
        if proven is not None:
            self._stamp(proven)
        cutoff, answered, shown = sent - self.tick, self._answered, None
        while answered and answered[0][1] <= cutoff:  # the oldest: their touches went on
            oldest = answered.popleft()[0]
            shown = oldest if shown is None else max(shown, oldest)
        if shown is not None:
            if pending and replied // self._grain == pending[-1][0] // self._grain:
                # one entry per slice (as ``remember``): later replies, later contacts
                shown = max(shown, pending.pop()[1])
            pending.append((replied, shown))
            if replied - self.last_contact > self.renewal_interval:
                # the contact is older than it should get (slow answers: a backlog, a loaded
                # host): the request that proves this need not wait for the next probe
                self.probe_now()

    def _stamp(self, contact: float) -> None:
        if contact > self.last_contact:
            self.last_contact = contact

    def connect_dated(self, contact: float | None) -> None:
        """A session was granted to a connect request sent at ``contact`` (see the module's
        doc): it is later than every earlier answer."""
        self._answered.clear()
        self._pending.clear()  # a new connection, maybe to another follower: its own order
        if contact is not None:
            self._stamp(contact)

    def probe_now(self) -> None:
        self._probe_now.set()

    async def probe(self) -> None:
        """A ``sync`` now and then, to keep ``last_contact`` fresh: each one goes through the
        leader and so dates the latest one answered at least ``tick_time`` before it."""
        while True:
            with anyio.move_on_after(self.probe_interval):
                await self._probe_now.wait()
            self._probe_now = anyio.Event()
            if self._connected():
                try:
                    await self._sync()
                except DriverError:
                    pass
