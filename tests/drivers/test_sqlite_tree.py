"""The sqlite node tree (``ha.drivers.sqlite.tree``) on a real file, with no event loop.

One test per behaviour of the driver model that the tree carries (versions, compare-and-set,
all-or-nothing transactions naming the failing op, ephemeral nodes ending with their session,
the change log and its resync), then a Hypothesis state machine that runs random operations,
transactions and session ends against a plain dict model of the tree and checks, after every
step, the nodes, their children, and that replaying the change log gives the same tree.
"""

from __future__ import annotations

import contextlib
import copy
import shutil
import sqlite3
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from ha.drivers.base import Check, Create, Delete, Op, SetData, Stat, parent_of
from ha.drivers.sqlite import schema, tree
from ha.errors import (
    BadVersion,
    ConfigurationError,
    DriverError,
    HAError,
    NodeExists,
    NoNode,
    NotEmpty,
    SessionExpired,
    TransactionFailed,
)

CREATED, CHANGED, DELETED = tree.CREATED, tree.CHANGED, tree.DELETED


def open_file(path: Path) -> sqlite3.Connection:
    conn = schema.connect(str(path), 5.0, "OFF")  # no fsync: nothing here survives the test
    schema.prepare(conn, str(path))
    return conn


@pytest.fixture
def conn(tmp_path: Path) -> Iterator[sqlite3.Connection]:
    with contextlib.closing(open_file(tmp_path / "ha.db")) as c:
        yield c


def write(conn: sqlite3.Connection, fn: Any, *args: Any) -> Any:
    """``fn(conn, *args)`` in a write transaction, as the driver runs every write."""
    with schema.writing(conn):
        return fn(conn, *args)


def session(conn: sqlite3.Connection, expires_at: float = 1e18) -> int:
    with schema.writing(conn):
        sid = conn.execute(
            "INSERT INTO sessions (expires_at, timeout, pid, created) VALUES (?, 1, 0, 0)",
            (expires_at,),
        ).lastrowid
    assert sid is not None
    return sid


def log(conn: sqlite3.Connection, after: int = 0) -> list[tuple[str, str]]:
    events, _, resynced = tree.read_changes(conn, after, [], 1_000_000)
    assert not resynced
    return events


def nodes(conn: sqlite3.Connection) -> dict[str, tuple[bytes, int, int | None]]:
    rows = conn.execute("SELECT path, data, version, ephemeral_owner FROM nodes").fetchall()
    return {path: (bytes(data), version, owner) for path, data, version, owner in rows}


# --- the file -------------------------------------------------------------------------------------


def test_prepare_makes_an_empty_file_an_ha_database_once(tmp_path: Path) -> None:
    path = str(tmp_path / "ha.db")
    first = schema.connect(path, 5.0, "OFF")
    instance = schema.prepare(first, path)
    again = schema.connect(path, 5.0, "OFF")
    assert schema.prepare(again, path) == instance  # a second opener finds it made
    assert first.execute("PRAGMA application_id").fetchone()[0] == schema.APPLICATION_ID
    assert first.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert tree.get(first, "/") == (b"", Stat(0, None, 0.0, 0))
    assert tree.last_change(first) == 0
    first.close()
    again.close()


def test_prepare_refuses_a_file_holding_other_data(tmp_path: Path) -> None:
    path = str(tmp_path / "other.db")
    with contextlib.closing(sqlite3.connect(path)) as other:
        other.execute("CREATE TABLE t (x)")
    with contextlib.closing(schema.connect(path, 5.0, "OFF")) as conn:
        with pytest.raises(ConfigurationError, match="not an ha database"):
            schema.prepare(conn, path)


# --- nodes, versions, compare-and-set -------------------------------------------------------------


def test_versions_start_at_zero_and_grow_by_one_per_write(conn: sqlite3.Connection) -> None:
    assert write(conn, tree.create, "/a", b"1", None, False) == "/a"
    data, stat = tree.get(conn, "/a")
    assert (data, stat.version, stat.ephemeral_owner) == (b"1", 0, None)
    assert write(conn, tree.set_data, "/a", b"2", -1).version == 1
    assert write(conn, tree.set_data, "/a", b"3", 1).version == 2
    assert tree.get(conn, "/a")[0] == b"3"
    assert tree.exists(conn, "/b") is None
    with pytest.raises(NoNode):
        tree.get(conn, "/b")


def test_a_transaction_numbers_its_creations_and_suffixes_are_change_ids(
    conn: sqlite3.Connection,
) -> None:
    # makepath's parents, a session's expired leases reaped first: all one transaction
    made = write(conn, tree.create, "/a/b/n_", b"", None, True, True)
    assert made.startswith("/a/b/n_") and len(made) == len("/a/b/n_") + 10
    numbers = {tree.get(conn, p)[1].created for p in ("/a", "/a/b", made)}
    assert len(numbers) == 1 and numbers.pop() > 0
    # the suffix is the change id of the node's own creation (the third change)
    assert int(made.removeprefix("/a/b/n_")) == tree.last_change(conn) == 3
    first = tree.get(conn, "/a")[1].created
    results = write(
        conn,
        tree.transact,
        [SetData("/a", b"x"), Create("/c"), Create("/a/b/n_", sequential=True), Create("/c/d")],
        None,
    )
    later = {tree.get(conn, p)[1].created for p in ("/c", results[2], "/c/d")}
    assert len(later) == 1 and later.pop() > first
    assert tree.get(conn, "/a")[1].created == first  # written, not created again


def test_compare_and_set_names_the_expected_and_the_actual_version(
    conn: sqlite3.Connection,
) -> None:
    write(conn, tree.create, "/a", b"", None, False)
    write(conn, tree.set_data, "/a", b"x", 0)
    with pytest.raises(BadVersion) as caught:
        write(conn, tree.set_data, "/a", b"y", 0)
    assert (caught.value.path, caught.value.expected, caught.value.actual) == ("/a", 0, 1)
    with pytest.raises(BadVersion):
        write(conn, tree.delete, "/a", 5, False)
    assert tree.get(conn, "/a")[0] == b"x"
    write(conn, tree.delete, "/a", 1, False)
    assert tree.exists(conn, "/a") is None


def test_create_needs_its_parent_unless_makepath(conn: sqlite3.Connection) -> None:
    with pytest.raises(NoNode) as caught:
        write(conn, tree.create, "/a/b/c", b"", None, False)
    assert caught.value.path == "/a/b"
    assert nodes(conn).keys() == {"/"}  # nothing half made
    write(conn, tree.create, "/a/b/c", b"c", None, True)
    assert tree.children(conn, "/") == ["a"]
    assert tree.children(conn, "/a/b") == ["c"]
    assert tree.get(conn, "/a")[1].num_children == 1
    with pytest.raises(NodeExists):
        write(conn, tree.create, "/a/b", b"", None, True)


def test_delete_refuses_a_parent_unless_recursive_and_logs_children_first(
    conn: sqlite3.Connection,
) -> None:
    write(conn, tree.create, "/a/b/c", b"", None, True)
    write(conn, tree.create, "/a0", b"", None, False)  # sorts right after /a's subtree
    with pytest.raises(NotEmpty):
        write(conn, tree.delete, "/a", -1, False)
    before = tree.last_change(conn)
    write(conn, tree.delete, "/a", -1, True)
    assert log(conn, before) == [("/a/b/c", DELETED), ("/a/b", DELETED), ("/a", DELETED)]
    assert nodes(conn).keys() == {"/", "/a0"}
    with pytest.raises(ConfigurationError):
        write(conn, tree.delete, "/", -1, True)


# --- transactions ---------------------------------------------------------------------------------


def test_a_transaction_returns_one_result_per_op(conn: sqlite3.Connection) -> None:
    write(conn, tree.create, "/a", b"", None, False)
    results = write(
        conn,
        tree.transact,
        [Check("/a", 0), Create("/a/b", b"b"), SetData("/a", b"x", 0), Delete("/a/b")],
        None,
    )
    assert results[0] is None and results[1] == "/a/b" and results[3] is None
    assert isinstance(results[2], Stat) and results[2].version == 1


@pytest.mark.parametrize(
    ("failing", "cause"),
    [
        (Check("/a", 3), BadVersion),
        (Create("/a"), NodeExists),
        (SetData("/missing", b""), NoNode),
        (Delete("/a"), NotEmpty),
        (Create("/no/parent"), NoNode),
    ],
)
def test_a_failing_transaction_names_its_op_and_changes_nothing(
    conn: sqlite3.Connection, failing: Op, cause: type[DriverError]
) -> None:
    write(conn, tree.create, "/a/kid", b"", None, True)
    before, changes = nodes(conn), tree.last_change(conn)
    ops = [SetData("/a", b"changed"), Create("/new"), failing, Create("/never")]
    with pytest.raises(TransactionFailed) as caught:
        write(conn, tree.transact, ops, None)
    assert caught.value.index == 2
    assert isinstance(caught.value.cause, cause)
    assert nodes(conn) == before and tree.last_change(conn) == changes


# --- ephemeral nodes and sessions -------------------------------------------------------------------


def test_ending_a_session_deletes_its_ephemeral_nodes_only(conn: sqlite3.Connection) -> None:
    mine, other = session(conn), session(conn)
    write(conn, tree.create, "/members", b"", None, False)
    write(conn, tree.create, "/members/me", b"", mine, False)
    write(conn, tree.create, "/lock", b"", mine, False)
    write(conn, tree.create, "/members/them", b"", other, False)
    assert tree.get(conn, "/lock")[1].ephemeral_owner == mine
    before = tree.last_change(conn)
    write(conn, tree.end_session, mine)
    assert sorted(log(conn, before)) == [("/lock", DELETED), ("/members/me", DELETED)]
    assert nodes(conn).keys() == {"/", "/members", "/members/them"}
    assert conn.execute("SELECT id FROM sessions").fetchall() == [(other,)]


def test_an_ended_session_cannot_create_ephemeral_nodes(conn: sqlite3.Connection) -> None:
    sid = session(conn)
    write(conn, tree.create, "/e", b"", sid, False)
    write(conn, tree.end_session, sid)
    write(conn, tree.create, "/e", b"", None, False)  # someone else's node at the path now
    with pytest.raises(SessionExpired):  # told before NodeExists: its session is what matters
        write(conn, tree.create, "/e", b"", sid, False)
    with pytest.raises(SessionExpired):  # not wrapped: the whole transaction is moot
        write(conn, tree.transact, [Create("/f", b"", ephemeral=True)], sid)


def test_ephemeral_nodes_cannot_have_children(conn: sqlite3.Connection) -> None:
    sid = session(conn)
    write(conn, tree.create, "/e", b"", sid, False)
    with pytest.raises(NoNode, match="ephemeral nodes cannot have children"):
        write(conn, tree.create, "/e/child", b"", None, False)


def test_expire_lapsed_ends_only_the_leases_run_out_before_now(
    conn: sqlite3.Connection,
) -> None:
    early, at_now, late = session(conn, 10.0), session(conn, 20.0), session(conn, 30.0)
    for sid in (early, at_now, late):
        write(conn, tree.create, f"/e{sid}", b"", sid, False)
    assert write(conn, tree.expire_lapsed, 20.0) == [early]
    assert tree.exists(conn, f"/e{early}") is None
    assert tree.exists(conn, f"/e{at_now}") is not None and tree.exists(conn, f"/e{late}")


# --- the change log -------------------------------------------------------------------------------


def test_the_change_log_is_read_in_order_a_page_at_a_time(conn: sqlite3.Connection) -> None:
    write(conn, tree.create, "/a", b"", None, False)
    write(conn, tree.set_data, "/a", b"x", -1)
    write(conn, tree.create, "/b", b"", None, False)
    write(conn, tree.delete, "/a", -1, False)
    page, cursor, resynced = tree.read_changes(conn, 0, [], 3)
    assert page == [("/a", CREATED), ("/a", CHANGED), ("/b", CREATED)] and not resynced
    page, cursor, _ = tree.read_changes(conn, cursor, [], 3)
    assert page == [("/a", DELETED)]
    assert tree.read_changes(conn, cursor, [], 3) == ([], cursor, False)


def test_a_cursor_behind_the_trimmed_log_resyncs_from_the_nodes(
    conn: sqlite3.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tree, "KEEP_CHANGES", 5)
    monkeypatch.setattr(tree, "TRIM_EVERY", 5)
    write(conn, tree.create, "/old", b"", None, False)
    write(conn, tree.create, "/gone", b"", None, False)
    cursor = tree.last_change(conn)
    write(conn, tree.create, "/new", b"", None, False)
    write(conn, tree.delete, "/gone", -1, False)
    for i in range(12):
        write(conn, tree.set_data, "/old", b"%d" % i, -1)
    events, moved, resynced = tree.read_changes(conn, cursor, ["/old", "/new", "/gone"], 100)
    assert resynced
    assert events == [("/old", CHANGED), ("/new", CREATED), ("/gone", DELETED)]
    assert moved == tree.last_change(conn)


# --- random operations against a model ---------------------------------------------------------------

PATHS = ("/a", "/a/b", "/a/b/c", "/d", "/d/e")


class Model:
    """The tree as a dict: what ZooKeeper's semantics say each operation does."""

    def __init__(self) -> None:
        self.nodes: dict[str, list[Any]] = {"/": [b"", 0, None]}  # path -> [data, version, owner]
        self.sessions: dict[int, float] = {}  # id -> expires_at

    def create(self, path: str, data: bytes, owner: int | None, makepath: bool) -> str:
        if owner is not None and owner not in self.sessions:
            raise SessionExpired(f"session {owner} has expired")
        if path in self.nodes:
            raise NodeExists(path)
        parent = parent_of(path)
        if parent not in self.nodes:
            if not makepath:
                raise NoNode(parent)
            self.create(parent, b"", None, True)
        elif self.nodes[parent][2] is not None:
            raise NoNode(f"{path} (ephemeral nodes cannot have children)")
        self.nodes[path] = [data, 0, owner]
        return path

    def check(self, path: str, version: int) -> None:
        if path not in self.nodes:
            raise NoNode(path)
        if version not in (-1, self.nodes[path][1]):
            raise BadVersion(path, version, self.nodes[path][1])

    def set_data(self, path: str, data: bytes, version: int) -> None:
        self.check(path, version)
        self.nodes[path][0] = data
        self.nodes[path][1] += 1

    def below(self, path: str) -> list[str]:
        return [p for p in self.nodes if p.startswith(path + "/")]

    def delete(self, path: str, version: int, recursive: bool) -> None:
        self.check(path, version)
        if not recursive and self.below(path):
            raise NotEmpty(path)
        for p in [*self.below(path), path]:
            del self.nodes[p]

    def transact(self, ops: list[Op], owner: int | None) -> None:
        for index, op in enumerate(ops):
            try:
                if isinstance(op, Check):
                    self.check(op.path, op.version)
                elif isinstance(op, Create):
                    self.create(op.path, op.data, owner if op.ephemeral else None, False)
                elif isinstance(op, SetData):
                    self.set_data(op.path, op.data, op.version)
                else:
                    self.delete(op.path, op.version, False)
            except (NoNode, NodeExists, BadVersion, NotEmpty) as exc:
                raise TransactionFailed(index, exc) from exc

    def end_session(self, sid: int) -> None:
        for path in [p for p, node in self.nodes.items() if node[2] == sid]:
            if path in self.nodes:
                self.delete(path, -1, True)
        self.sessions.pop(sid, None)


versions = st.sampled_from([-1, 0, 1, 2])
datas = st.sampled_from([b"", b"x", b"yz"])
ops = st.one_of(
    st.builds(Check, st.sampled_from(PATHS), versions),
    st.builds(Create, st.sampled_from(PATHS), datas, st.booleans()),
    st.builds(SetData, st.sampled_from(PATHS), datas, versions),
    st.builds(Delete, st.sampled_from(PATHS), versions),
)


class TreeModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="ha-tree-")
        self.conn = open_file(Path(self.dir) / "ha.db")
        self.model = Model()

    def teardown(self) -> None:
        self.conn.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def owner(self, pick: int) -> int | None:
        """None, one of the sessions (live or ended), or one never opened."""
        sids = sorted(self.model.sessions) + [0]
        return None if pick == 0 else sids[pick % len(sids)]

    def both(self, name: str, *args: Any) -> None:
        """Run ``name`` on the file and on a copy of the model: same outcome, same error."""
        model = copy.deepcopy(self.model)
        try:
            getattr(model, name)(*args)
        except HAError as exc:
            expected: HAError | None = exc
        else:
            expected = None
            self.model = model
        try:
            write(self.conn, getattr(tree, name), *args)
        except HAError as exc:
            assert expected is not None, f"{name}{args}: the file raised {exc!r}"
            assert (type(exc), str(exc)) == (type(expected), str(expected))
            if isinstance(exc, TransactionFailed):
                assert isinstance(expected, TransactionFailed) and exc.index == expected.index
        else:
            assert expected is None, f"{name}{args}: the model raised {expected!r}"

    @initialize(ends=st.lists(st.sampled_from([10.0, 20.0, 30.0]), min_size=2, max_size=2))
    def open_sessions(self, ends: list[float]) -> None:
        for expires_at in ends:
            self.open_session(expires_at)

    @rule(expires_at=st.sampled_from([10.0, 20.0, 30.0]))
    def open_session(self, expires_at: float) -> None:
        self.model.sessions[session(self.conn, expires_at)] = expires_at

    @rule(path=st.sampled_from(PATHS), data=datas, owner=st.integers(0, 3), makepath=st.booleans())
    def create(self, path: str, data: bytes, owner: int, makepath: bool) -> None:
        self.both("create", path, data, self.owner(owner), makepath)

    @rule(path=st.sampled_from(PATHS), data=datas, version=versions)
    def set_data(self, path: str, data: bytes, version: int) -> None:
        self.both("set_data", path, data, version)

    @rule(path=st.sampled_from(PATHS), version=versions, recursive=st.booleans())
    def delete(self, path: str, version: int, recursive: bool) -> None:
        self.both("delete", path, version, recursive)

    @rule(batch=st.lists(ops, min_size=1, max_size=4), owner=st.integers(0, 3))
    def transact(self, batch: list[Op], owner: int) -> None:
        self.both("transact", batch, self.owner(owner))

    @rule(pick=st.integers(1, 3))
    def end_session(self, pick: int) -> None:
        sid = self.owner(pick)
        if sid:
            self.both("end_session", sid)

    @rule(now=st.sampled_from([15.0, 25.0, 35.0]))
    def expire_lapsed(self, now: float) -> None:
        lapsed = sorted(sid for sid, end in self.model.sessions.items() if end < now)
        for sid in lapsed:
            self.model.end_session(sid)
        assert sorted(write(self.conn, tree.expire_lapsed, now)) == lapsed

    @invariant()
    def the_file_holds_the_model(self) -> None:
        assert nodes(self.conn) == {p: tuple(node) for p, node in self.model.nodes.items()}
        for path in self.model.nodes:
            names = sorted(
                p.rsplit("/", 1)[1] for p in self.model.nodes if p != "/" and parent_of(p) == path
            )
            assert tree.children(self.conn, path) == names
            assert tree.get(self.conn, path)[1].num_children == len(names)

    @invariant()
    def replaying_the_change_log_gives_the_tree(self) -> None:
        present = {"/"}
        for path, kind in log(self.conn):
            assert (path in present) == (kind != CREATED), f"{kind} {path}"
            if kind == CREATED:
                present.add(path)
            elif kind == DELETED:
                present.remove(path)
        assert present == self.model.nodes.keys()


TreeModel.TestCase.settings = settings(
    max_examples=150,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestTreeModel = TreeModel.TestCase
