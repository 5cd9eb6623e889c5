"""deploy/kubernetes/: the Role grants exactly what the driver uses, and the Deployment's
``ha`` command line parses with the real ``ha`` command.

The requests come from a real run (two electors on their own drivers: a handover, a crash, the
survivor's peer reaping the dead session, the Leases shown to kubectl) against the FAKE API
server of tests/support/kubeapi (no real apiserver runs here, and the fake models no RBAC):
its access log names each request, its per-verb counters (``/_fake/stats``) confirm the log
was read whole, and the Role's rules are then evaluated here the way RBAC evaluates them.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import anyio
import click
import pytest
import yaml

from ha.cli import cli
from ha.drivers.kubernetes import KubernetesDriver
from ha.drivers.kubernetes.announce import ROLE
from ha.election import Elector, State
from ha.errors import ElectionFailed
from ha.testing import History, Recorder, faults
from tests.support.backends.kubernetes import write_kubeconfig
from tests.support.kubeapi.process import FakeKubeApi
from tests.support.schemas import schema_errors

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes"
LOGGED = re.compile(r'"(GET|POST|PUT|PATCH|DELETE) (\S+) HTTP/1\.[01]"')


def documents(name: str) -> dict[str, dict[str, Any]]:
    """The YAML documents of ``deploy/kubernetes/NAME``, by kind."""
    with open(DEPLOY / name) as file:
        return {doc["kind"]: doc for doc in yaml.safe_load_all(file) if doc}


def container() -> dict[str, Any]:
    spec = documents("deployment.yaml")["Deployment"]["spec"]["template"]["spec"]
    found: dict[str, Any] = spec["containers"][0]
    return found


def expanded(args: list[str], env: dict[str, str]) -> list[str]:
    """The arguments as the kubelet hands them over: ``$(VAR)`` replaced from the env."""
    return [re.sub(r"\$\((\w+)\)", lambda m: env[m.group(1)], arg) for arg in args]


def parsed_run(args: list[str]) -> tuple[click.Context, click.Context]:
    """The ``ha`` group's context and its subcommand's, parsed (and checked) by click."""
    at = args.index("run")  # the group's options, then the command's
    group = cli.make_context("ha", args[:at])
    command = cli.get_command(group, "run")
    assert command is not None
    return group, command.make_context("run", args[at + 1 :], parent=group)


# --- the requests of a real run ---------------------------------------------------------------


@dataclass(frozen=True)
class Request:
    group: str
    resource: str
    verb: str
    name: str | None  # the object's name, or the metadata.name a list or watch selects


def request_of(method: str, target: str) -> Request | None:
    """What RBAC sees of one request line (None: not the Kubernetes API, e.g. /_fake)."""
    url = urlsplit(target)
    query = parse_qs(url.query)
    parts = url.path.strip("/").split("/")
    if parts[0] == "api":
        group, rest = "", parts[2:]
    elif parts[0] == "apis":
        group, rest = parts[1], parts[3:]
    else:
        return None
    watch = query.get("watch", [""])[0] in ("true", "1")
    if rest[:1] == ["watch"]:
        watch, rest = True, rest[1:]
    if rest[:1] == ["namespaces"] and len(rest) > 2:
        rest = rest[2:]
    resource, name = rest[0], (rest[1] if len(rest) > 1 else None)
    if name is None:
        for selector in query.get("fieldSelector", []):
            if selector.startswith("metadata.name="):
                name = selector.removeprefix("metadata.name=")
    if watch:
        verb = "watch"
    elif method == "GET":
        verb = "get" if len(rest) > 1 else "list"
    else:
        verb = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}[method]
        if verb == "delete" and len(rest) == 1:
            verb = "deletecollection"
    return Request(group, resource, verb, name)


def granted(rules: list[dict[str, Any]], request: Request) -> bool:
    """Whether one of ``rules`` allows ``request``, as Kubernetes RBAC decides it."""
    for rule in rules:
        if (
            request.group in rule["apiGroups"]
            and request.resource in rule["resources"]
            and request.verb in rule["verbs"]
        ):
            names = rule.get("resourceNames")
            if not names or (request.verb != "create" and request.name in names):
                return True
    return False


@pytest.fixture
def verbose_kube_api(tmp_path: Path) -> Iterator[FakeKubeApi]:
    server = FakeKubeApi(tmp_path / "kubeapi", verbose=True)  # it logs every request
    server.start()
    try:
        yield server
    finally:
        server.remove()


async def a_real_run(url: str, election: str) -> None:
    """Two electors on their own drivers, then a third: a handover, a crash, a reaping."""
    history = History()

    async def shown(driver: Any) -> None:  # its Lease for kubectl written (leaders.py)
        while not (term := driver._leaders.terms.get(election)) or not term.version:
            await anyio.sleep(0.02)
        while driver._notices.pending:  # announce.py's too
            await anyio.sleep(0.02)

    async def run(elector: Elector, *, task_status: Any) -> None:
        try:
            await elector.run(Recorder(str(elector.identity), history), task_status=task_status)
        except ElectionFailed:  # its driver crashed (a fault of the test)
            pass

    drivers = [KubernetesDriver.from_url(url, session_timeout=1) for _ in range(3)]
    a, b, c = (Elector(d, election, f"pod-{i}") for i, d in enumerate(drivers))
    try:
        async with anyio.create_task_group() as tg:
            await drivers[0].start()
            await drivers[1].start()
            await tg.start(run, a)
            await a.wait_active()
            await tg.start(run, b)
            await shown(drivers[0])
            await b.wait_state(State.STANDBY)
            assert await a.contenders() == [b"pod-0", b"pod-1"]
            a.quit()  # a graceful handover
            await b.wait_active()
            await shown(drivers[1])
            await drivers[2].start()
            await tg.start(run, c)
            await faults(drivers[1]).crash()  # pod-1 dies: pod-2's driver reaps its session
            await c.wait_active()
            await shown(drivers[2])
            c.quit()
            b.quit()
    finally:
        for driver in drivers:
            await driver.aclose()


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # the same requests on trio
async def test_the_role_grants_what_a_real_run_uses_and_nothing_more(
    verbose_kube_api: FakeKubeApi, tmp_path: Path
) -> None:
    rules = documents("role.yaml")["Role"]["rules"]
    env = {"NAMESPACE": "team-a", "POD_NAME": "myapp-5d9c7-x2x4k"}
    group, run = parsed_run(expanded(container()["args"], env))
    url, election = group.params["url"], run.params["path"]
    namespace, rest = url.removeprefix("k8s://").split("/", 1)
    server = verbose_kube_api
    server.create_namespace(namespace)
    pod = {"metadata": {"name": env["POD_NAME"]}, "spec": {"containers": []}}
    assert server.request("POST", f"/api/v1/namespaces/{namespace}/pods", pod)[0] == 201
    kubeconfig = write_kubeconfig(tmp_path, server.url, namespace)
    start, before = len(server.log.read_text().splitlines()), server.stats()["requests"]

    with anyio.fail_after(30):
        join = "&" if "?" in rest else "?"
        await a_real_run(f"k8s://{namespace}/{rest}{join}kubeconfig={kubeconfig}", election)

    lines = server.log.read_text().splitlines()[start:]
    requests = [request_of(*m.groups()) for line in lines if (m := LOGGED.search(line))]
    sent = [r for r in requests if r is not None]
    verbs = Counter(r.verb for r in sent)
    counted = Counter(server.stats()["requests"]) - Counter(before)
    assert set(verbs) == set(counted), "the log and the fake's counters disagree"

    refused = sorted({r for r in sent if not granted(rules, r)}, key=repr)
    assert not refused, f"role.yaml does not grant: {refused}"
    used = {(r.group, r.resource, r.verb) for r in sent}
    granted_all = {
        (g, res, verb)
        for rule in rules
        for g in rule["apiGroups"]
        for res in rule["resources"]
        for verb in rule["verbs"]
    }
    assert granted_all - used == set(), "role.yaml grants what the driver never asks for"
    named = [r for r in rules if r.get("resourceNames")]
    assert [r["resourceNames"] for r in named] == [[f"{rest.split('?')[0]}-ha"]]


# --- the manifests themselves -----------------------------------------------------------------


def test_the_deployment_runs_ha_run_with_the_pod_name_as_its_id() -> None:
    deployment = documents("deployment.yaml")["Deployment"]
    spec = deployment["spec"]
    assert spec["replicas"] == 2
    pod = spec["template"]["spec"]
    role = documents("role.yaml")
    account = role["ServiceAccount"]["metadata"]["name"]
    assert pod["serviceAccountName"] == account
    binding = role["RoleBinding"]
    assert binding["roleRef"]["name"] == role["Role"]["metadata"]["name"]
    assert {"kind": "ServiceAccount", "name": account} in binding["subjects"]

    box = container()
    assert box["command"] == ["ha"]
    env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in box["env"]}
    assert env == {"POD_NAME": "metadata.name", "NAMESPACE": "metadata.namespace"}
    used = set(re.findall(r"\$\((\w+)\)", " ".join(box["args"])))
    assert used <= set(env)
    group, run = parsed_run(expanded(box["args"], {"NAMESPACE": "ns", "POD_NAME": "pod-1"}))
    assert group.params["url"].startswith("k8s://ns/myapp")
    assert run.info_name == "run"
    assert run.params["identity"] == "pod-1"
    assert run.params["command"]  # the app, after --
    # the pod labels itself with its role (?pod=), which the Service selects the active by
    assert "pod=pod-1" in group.params["url"].split("?", 1)[1].split("&")
    # the readiness probe asks /member of `ha run --http`: active or standby is Ready
    host, port = run.params["http"].rsplit(":", 1)
    probe = box["readinessProbe"]["httpGet"]
    assert probe["path"] == "/member"
    ports = {p["name"]: p["containerPort"] for p in box["ports"]}
    assert ports[probe["port"]] == int(port) and host == "0.0.0.0"


def test_a_rollout_keeps_a_standby_and_the_service_follows_the_active() -> None:
    """RollingUpdate with a surge and no unavailability: a new pod must be Ready (joined,
    /member) before an old one stops, so the election always has a standby; the Service
    selects the pod labelled active; a PodDisruptionBudget keeps a drain from taking both."""
    found = documents("deployment.yaml")
    deployment, service, budget = (
        found[k] for k in ("Deployment", "Service", "PodDisruptionBudget")
    )
    strategy = deployment["spec"]["strategy"]
    assert strategy == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
    }
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"] == {**pod_labels, ROLE: "active"}
    assert ROLE not in deployment["spec"]["selector"]["matchLabels"]  # the label changes
    assert (
        budget["spec"]["selector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
    )
    assert budget["spec"]["maxUnavailable"] == 1 < deployment["spec"]["replicas"]


@pytest.mark.parametrize("name", ["deployment.yaml", "role.yaml"])
def test_the_manifests_match_the_official_schemas(name: str) -> None:
    """Every object against the API's OpenAPI schema as the official client carries it
    (tests/support/schemas.py): no unknown field, no missing required one, the right types."""
    with open(DEPLOY / name) as file:
        for doc in yaml.safe_load_all(file):
            if doc:
                assert schema_errors(doc) == [], doc["kind"]


def test_the_schema_check_catches_what_the_api_server_refuses() -> None:
    deployment = documents("deployment.yaml")["Deployment"]
    wrong = yaml.safe_load(yaml.safe_dump(deployment))
    wrong["spec"]["strategy"]["rollingUpdate"]["maxSurge "] = 1  # a typo: unknown field
    wrong["spec"]["replicas"] = "2"  # a string where an integer goes
    del wrong["spec"]["selector"]  # required
    box = wrong["spec"]["template"]["spec"]["containers"][0]
    box["readinessProbe"]["httpGet"]["port"] = ["ha"]  # int or string, not a list
    assert [where for where, _ in schema_errors(wrong)] == [
        "spec.replicas",
        "spec.selector",
        "spec.strategy.rollingUpdate.maxSurge ",
        "spec.template.spec.containers.0.readinessProbe.httpGet.port",
    ]
    assert schema_errors({"apiVersion": "apps/v1beta1", "kind": "Deployment"}) == [
        ("apps/v1beta1 Deployment", "not a kind the official client's API serves")
    ]
    assert schema_errors({"apiVersion": "v1", "kind": "PodDisruptionBudget"})  # policy/v1's


def test_a_mistyped_argument_would_be_refused_by_the_same_check() -> None:
    args = expanded(container()["args"], {"NAMESPACE": "ns", "POD_NAME": "pod-1"})
    with pytest.raises(click.UsageError):
        parsed_run([a.replace("--id", "--identity") for a in args])
