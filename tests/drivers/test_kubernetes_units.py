"""The Kubernetes driver's pieces that need no server: URL and options, kubeconfig and
in-cluster configuration, the tree's keys and encoding, transactions on the tree, and the
peers' expiry clock. (The driver against an API server: test_kubernetes.py, on a fake.)"""

from __future__ import annotations

import base64
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import ha.drivers
from ha.drivers.base import Check, Create, Delete, NodeEvent, NodeEventKind, SetData
from ha.drivers.kubernetes import KubernetesDriver
from ha.drivers.kubernetes.config import from_kubeconfig, in_cluster, load
from ha.drivers.kubernetes.liveness import Observer, session_of
from ha.drivers.kubernetes.settings import Settings, parse_url
from ha.drivers.kubernetes.tree import (
    LIMIT,
    LOG,
    Entry,
    TooLarge,
    Tree,
    apply,
    diff,
    key_of,
    order,
    path_of,
    reap,
)
from ha.errors import (
    BadVersion,
    ConfigurationError,
    CorruptData,
    NodeExists,
    NoNode,
    NotEmpty,
    SessionExpired,
    TransactionFailed,
)

CONFIGMAP_KEY = re.compile(r"[-._a-zA-Z0-9]+")


def kubeconfig(tmp_path: Path, **user: Any) -> Path:
    ca = base64.b64encode(b"-----BEGIN CERTIFICATE-----\n").decode()
    text = f"""
apiVersion: v1
kind: Config
current-context: dev
contexts:
- name: dev
  context: {{cluster: c1, user: u1, namespace: team-a}}
- name: prod
  context: {{cluster: c2, user: u2}}
clusters:
- name: c1
  cluster: {{server: "http://127.0.0.1:8080"}}
- name: c2
  cluster: {{server: "https://10.0.0.1:6443", certificate-authority-data: "{ca}",
             insecure-skip-tls-verify: true}}
users:
- name: u1
  user: {{token: secret-token}}
- name: u2
  user: {user or {"tokenFile": "token.txt"}}
"""
    path = tmp_path / "config"
    path.write_text(text)
    (tmp_path / "token.txt").write_text("from-file\n")
    return path


# --- URL and options ----------------------------------------------------------------------------


def test_the_url_gives_namespace_name_and_options(tmp_path: Path) -> None:
    config = kubeconfig(tmp_path)
    driver = ha.drivers.connect(f"k8s://ns-1/my-app?session_timeout=2.5&kubeconfig={config}")
    assert isinstance(driver, KubernetesDriver)
    assert driver.namespace == "ns-1" and driver.settings.tree == "my-app-ha"
    assert driver.session_timeout == 3.0  # a Lease counts whole seconds
    assert driver.settings.lease(0xAB) == "my-app-ha-s-00000000000000ab"
    # the namespace of the kubeconfig's context when the URL has none
    assert ha.drivers.connect(f"k8s:///my-app?kubeconfig={config}").namespace == "team-a"
    # keywords win over the URL
    other = KubernetesDriver.from_url(f"k8s://a/b?kubeconfig={config}", context="prod")
    assert other.cluster.server == "https://10.0.0.1:6443" and other.namespace == "a"


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("k8s://ns", "one name after the namespace"),
        ("k8s://ns/a/b", "one name after the namespace"),
        ("k8s://NS/app", "namespace 'NS' must be lowercase"),
        ("k8s://ns/app_1", "name 'app_1' must be lowercase"),
        ("k8s://ns/" + "a" * 42, "at most 41 characters"),
        ("k8s://ns/app?ttl=3", "unknown option 'ttl'"),
        ("k8s://ns/app?session_timeout=-1", "positive"),
        ("etcd://ns/app", "expected k8s://NAMESPACE/NAME"),
    ],
)
def test_bad_urls_are_one_line_configuration_errors(url: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=re.escape(message)) as info:
        KubernetesDriver.from_url(url, kubeconfig="/nonexistent")
    assert "\n" not in str(info.value)


def test_parse_url_keeps_keywords_over_the_query() -> None:
    assert parse_url("k8s://a/b?op_timeout=1", {"op_timeout": 2}) == ("a", "b", {"op_timeout": 2})
    assert Settings.check(None, "b", session_timeout=0.2).lease_seconds == 1


# --- configuration ------------------------------------------------------------------------------


def test_kubeconfig_current_context_and_another(tmp_path: Path) -> None:
    config = kubeconfig(tmp_path)
    dev = load(str(config))
    assert (dev.server, dev.namespace, dev.bearer()) == (
        "http://127.0.0.1:8080",
        "team-a",
        "secret-token",
    )
    assert dev.ssl_context() is False  # plain http: a local fake
    prod = load(str(config), "prod")
    assert prod.insecure and prod.ca_data is not None
    assert prod.bearer() == "from-file"  # tokenFile, relative to the kubeconfig
    assert prod.token_file == str(tmp_path / "token.txt")


def test_kubeconfig_variable_merges_files_first_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = tmp_path / "first"
    first.write_text("current-context: prod\n")
    second = kubeconfig(tmp_path)
    monkeypatch.setenv("KUBECONFIG", f"{first}:{tmp_path / 'missing'}:{second}")
    assert load().server == "https://10.0.0.1:6443"  # the first file's current context


@pytest.mark.parametrize(
    ("user", "message"),
    [
        ({"exec": {"command": "aws"}}, "exec apiVersion None is not one ha speaks"),
        (
            {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "aws"}},
            "exec needs interactiveMode with client.authentication.k8s.io/v1",
        ),
        (
            {
                "exec": {
                    "apiVersion": "client.authentication.k8s.io/v1beta1",
                    "command": "kubelogin",
                    "interactiveMode": "Always",
                }
            },
            "always prompts",
        ),
        ({"auth-provider": {"name": "gcp"}}, "auth-provider plugin"),
    ],
)
def test_bad_or_unsupported_credential_plugins_are_refused_in_one_line(
    tmp_path: Path, user: dict[str, Any], message: str
) -> None:
    config = kubeconfig(tmp_path, **user)
    with pytest.raises(ConfigurationError, match=message):
        load(str(config), "prod")


def test_kubeconfig_problems_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="does not exist"):
        load(str(tmp_path / "nope"))
    bad = tmp_path / "bad"
    bad.write_text("clusters: [\n")
    with pytest.raises(ConfigurationError, match=r"not valid YAML \(line"):
        load(str(bad))
    config = kubeconfig(tmp_path)
    with pytest.raises(ConfigurationError, match=r"no context 'staging' .*known: dev, prod"):
        load(str(config), "staging")
    empty = tmp_path / "empty"
    empty.write_text("apiVersion: v1\n")
    with pytest.raises(ConfigurationError, match="no current-context"):
        from_kubeconfig([empty], None)


def test_in_cluster_service_account(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    with pytest.raises(ConfigurationError, match="without a service account token"):
        in_cluster(tmp_path)
    (tmp_path / "token").write_text("tok\n")
    (tmp_path / "namespace").write_text("prod\n")
    cluster = in_cluster(tmp_path)
    assert (cluster.server, cluster.namespace, cluster.bearer()) == (
        "https://10.96.0.1:443",
        "prod",
        "tok",
    )
    (tmp_path / "token").write_text("rotated\n")
    assert cluster.bearer() == "rotated"  # read again at each connect


def test_no_configuration_at_all_says_what_was_tried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(ConfigurationError, match="KUBECONFIG.*service account"):
        load()


# --- the tree -----------------------------------------------------------------------------------


@given(
    st.text(
        alphabet=st.characters(blacklist_characters="/\x00", blacklist_categories=("Cs",)),
        min_size=1,
        max_size=6,
    )
)
def test_keys_are_valid_configmap_keys_and_map_back(segment: str) -> None:
    for path in (f"/{segment}", f"/a/{segment}", f"/{segment}/{segment}"):
        key = key_of(path)
        assert CONFIGMAP_KEY.fullmatch(key) and key not in (".", "..")
        assert not key.startswith("..")
        assert path_of(key) == path


def test_keys_are_one_to_one_where_naive_escaping_is_not() -> None:
    paths = ["/a.b", "/a/b", "/a_2fb", "/a_b", "/a-b"]
    keys = [key_of(p) for p in paths]
    assert len(set(keys)) == len(paths)
    assert key_of("/a/b") == "n.a.b"
    with pytest.raises(ConfigurationError, match="too long for a ConfigMap key"):
        key_of("/" + "x" * 300)
    assert path_of("meta") is None and path_of("n.a_zz") is None


def encoded(tree: Tree) -> dict[str, Any]:
    return tree.encode("ns", "app-ha", "app")


def test_a_tree_round_trips_through_its_configmap() -> None:
    tree = Tree({"/a": Entry(b"\x00\xffdata", 3, 7, 0x1F, 12.5)}, {0x1F}, txn=9, seq=4)
    body = encoded(tree)
    assert body["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "ha"
    assert "resourceVersion" not in body["metadata"]  # never read: a create
    body["metadata"]["resourceVersion"] = "41"
    again = Tree.decode(body, "cm")
    assert again.nodes == tree.nodes and again.sessions == {0x1F}
    assert (again.txn, again.seq, again.version) == (9, 4, "41")
    assert encoded(again)["metadata"]["resourceVersion"] == "41"  # a write is a CAS


@pytest.mark.parametrize(
    "body",
    [
        {"metadata": {"name": "app-ha"}, "data": {"color": "blue"}},
        {"metadata": {"labels": {"app.kubernetes.io/managed-by": "helm"}}, "data": {"meta": "{}"}},
    ],
)
def test_a_foreign_configmap_is_corrupt_data_in_one_line(body: dict[str, Any]) -> None:
    with pytest.raises(CorruptData, match="does not hold an ha tree"):
        Tree.decode(body, "/api/v1/namespaces/ns/configmaps/app-ha")


def test_a_foreign_key_or_entry_in_our_configmap_is_corrupt_data() -> None:
    body = encoded(Tree({"/a": Entry(b"x")}))
    body["binaryData"]["n.a"] = base64.b64encode(b"hello").decode()
    with pytest.raises(CorruptData, match="not written by ha"):
        Tree.decode(body, "cm")
    body = encoded(Tree())
    body["binaryData"] = {"extra": ""}
    with pytest.raises(CorruptData, match="key ha did not write"):
        Tree.decode(body, "cm")


def test_the_one_mebibyte_limit_is_a_clear_error_before_any_write() -> None:
    tree = Tree({"/big": Entry(b"x" * LIMIT)})
    with pytest.raises(
        TooLarge, match=r"over the 1 MiB a Kubernetes ConfigMap may hold \(ns/app-ha\)"
    ):
        encoded(tree)
    assert not TooLarge("x").transient


def test_transactions_on_the_tree() -> None:
    tree = Tree(sessions={5}, txn=3)
    new, results = apply(
        tree,
        [Create("/a", b"1"), Create("/a/q-", sequential=True), Create("/e", ephemeral=True)],
        5,
        now=1.0,
    )
    assert results == ["/a", "/a/q-0000000001", "/e"]
    assert tree.nodes == {}  # untouched
    assert new.txn == 4 and {e.created for e in new.nodes.values()} == {4}
    assert new.nodes["/e"].owner == 5 and new.stat("/a").num_children == 1  # type: ignore[union-attr]
    newer, (stat, none) = apply(new, [SetData("/a", b"2", 0), Check("/e", 0)], 5)
    assert stat.version == 1 and none is None  # type: ignore[union-attr]
    _, (check,) = apply(newer, [Check("/a", 1)], 5)
    assert check is None
    failures = [
        ([Create("/a")], 0, NodeExists),
        ([Create("/x/y")], 0, NoNode),
        ([Create("/e/child")], 0, NoNode),
        ([SetData("/a", b"", 7)], 0, BadVersion),
        ([Check("/b")], 0, NoNode),
        ([Delete("/a")], 0, NotEmpty),
        ([Delete("/a/q-0000000001"), Delete("/a", 5)], 1, BadVersion),
    ]
    for ops, index, error in failures:
        with pytest.raises(TransactionFailed) as info:
            apply(newer, ops, 5)
        assert info.value.index == index and isinstance(info.value.cause, error)
    with pytest.raises(SessionExpired):  # a session struck off creates no ephemeral node
        apply(newer, [Create("/f", ephemeral=True)], 6)


def test_reaping_strikes_sessions_off_with_their_ephemeral_nodes() -> None:
    tree, _ = apply(Tree(sessions={1, 2}), [Create("/p"), Create("/e1", ephemeral=True)], 1)
    tree, _ = apply(tree, [Create("/e2", ephemeral=True)], 2)
    after, gone = reap(tree, {1})
    assert gone == ["/e1"] and after.sessions == {2} and after.txn == tree.txn + 1
    assert set(after.nodes) == {"/p", "/e2"}
    same, nothing = reap(after, {1})
    assert same is after and nothing == []  # nothing to write


def test_diff_gives_the_events_between_two_trees() -> None:
    one, _ = apply(Tree(), [Create("/a"), Create("/b")], None)
    two, _ = apply(one, [SetData("/a", b"x"), Delete("/b"), Create("/c")], None)
    three, _ = apply(two, [Delete("/c"), Create("/c")], None)
    kinds = NodeEventKind
    assert diff(Tree(), one, ["/a", "/z"]) == [NodeEvent("/a", kinds.CREATED)]
    assert diff(one, two, ["/a", "/b", "/c"]) == [
        NodeEvent("/a", kinds.CHANGED),
        NodeEvent("/b", kinds.DELETED),
        NodeEvent("/c", kinds.CREATED),
    ]
    assert diff(two, three, ["/c", "/a"]) == [
        NodeEvent("/c", kinds.DELETED),
        NodeEvent("/c", kinds.CREATED),
    ]


def test_a_coalesced_diff_reports_a_change_written_after_a_creation() -> None:
    """After a 410 the re-read may be many writes ahead of the watch: a node it finds new
    but already written since was created, then changed (a reader may have seen it between)."""
    kinds = NodeEventKind
    one, _ = apply(Tree(), [Create("/a"), Create("/b")], None)
    two, _ = apply(one, [SetData("/a", b"x")], None)
    three, _ = apply(two, [Delete("/b")], None)
    four, _ = apply(three, [Create("/b"), SetData("/b", b"y")], None)
    assert diff(Tree(), two, ["/a", "/b"], coalesced=True) == [
        NodeEvent("/a", kinds.CREATED),
        NodeEvent("/a", kinds.CHANGED),
        NodeEvent("/b", kinds.CREATED),  # never written since: nothing more to report
    ]
    assert diff(one, four, ["/b"], coalesced=True) == [
        NodeEvent("/b", kinds.DELETED),
        NodeEvent("/b", kinds.CREATED),
        NodeEvent("/b", kinds.CHANGED),
    ]
    assert diff(Tree(), two, ["/a"]) == [NodeEvent("/a", kinds.CREATED)]  # one write: as is


def test_the_tree_logs_its_last_writes_and_events_follow_their_order() -> None:
    """A watcher that missed writes (a 410) tells their events in the order of the writes:
    the tree keeps the paths of its last LOG writes (meta "log", kept through the ConfigMap)."""
    kinds = NodeEventKind
    start, _ = apply(Tree(), [Create("/leader"), Create("/other")], None)
    tree, _ = apply(start, [Create("/pause")], None)
    tree, _ = apply(tree, [SetData("/other", b"1")], None)
    tree, _ = apply(tree, [Delete("/leader")], None)
    tree, _ = apply(tree, [SetData("/other", b"2")], None)
    tree = Tree.decode(tree.encode("ns", "r-ha", "r"), "here")
    assert [txn for txn, _ in tree.log] == [1, 2, 3, 4, 5]
    assert diff(start, tree, ["/leader", "/other", "/pause"], coalesced=True) == [
        NodeEvent("/pause", kinds.CREATED),
        NodeEvent("/other", kinds.CHANGED),
        NodeEvent("/leader", kinds.DELETED),
    ]
    for number in range(LOG):  # the log keeps the last LOG writes only
        tree, _ = apply(tree, [SetData("/other", b"%d" % number)], None)
    assert len(tree.log) == LOG and tree.log[0][0] == tree.txn - LOG + 1
    # writes older than the log: their paths first, by name
    assert order(start, tree, ["/other", "/pause", "/leader"]) == ["/leader", "/pause", "/other"]
    # a tree written without a log (an older driver): its last write's paths, after the rest
    tree.log = []
    assert order(start, tree, ["/other", "/pause"]) == ["/pause", "/other"]


# --- the peers' clock ---------------------------------------------------------------------------


def lease(name: str, version: str, duration: Any = 2) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "resourceVersion": version},
        "spec": {"leaseDurationSeconds": duration},
    }


def test_an_observer_expires_a_lease_its_record_duration_after_it_last_changed() -> None:
    observer = Observer()
    assert observer.observe([lease("a", "1", 2), lease("b", "5", 10)], now=100.0) == []
    assert observer.observe([lease("a", "1", 2), lease("b", "5", 10)], now=101.9) == []
    assert observer.observe([lease("a", "2", 2), lease("b", "5", 10)], now=102.0) == []  # renewed
    assert observer.observe([lease("a", "2", 2), lease("b", "5", 10)], now=103.9) == []
    # the record's own duration counts, not the observer's: b lives 10 s from first sight
    assert observer.observe([lease("a", "2", 2), lease("b", "5", 10)], now=104.0) == [("a", "2")]
    assert observer.observe([lease("b", "5", 10)], now=109.9) == []
    assert observer.observe([lease("b", "5", 10), lease("a", "2", 2)], now=110.0) == [("b", "5")]
    # "a" was forgotten while unlisted: seen again, it is timed from now
    assert observer.observe([lease("a", "2", "x")], now=110.5) == []
    assert observer.observe([lease("a", "2", "x")], now=111.5) == [("a", "2")]


def test_session_ids_come_from_lease_names() -> None:
    prefix = "app-ha-s-"
    assert session_of({"metadata": {"name": "app-ha-s-00000000000000ff"}}, prefix) == 255
    assert session_of({"metadata": {"name": "other"}}, prefix) is None
    assert session_of({"metadata": {"name": "app-ha-s-zz"}}, prefix) is None
