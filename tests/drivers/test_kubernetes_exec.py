"""kubeconfigs whose user runs an ``exec`` credential plugin (EKS, GKE, AKS), as client-go
runs them (``ha/drivers/kubernetes/exec_auth.py``): a real plugin script, a FAKE API server
(tests/support/kubeapi) that takes only the tokens it lists, an elector that leads through
them, under asyncio and trio; and the command's one-line error for a plugin that is missing.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from ha.drivers.kubernetes import KubernetesDriver
from ha.election import Elector, State
from ha.testing import History, Recorder
from tests.support.cli import ha, ha_env, one_error_line
from tests.support.kubeapi.process import FakeKubeApi

pytestmark = pytest.mark.timeout(60)

# The plugin: counts its runs, notes what it was told, and prints the ExecCredential of its
# run: token tok-N, lasting $LIFETIME seconds. The server refuses tok-1 (a revoked token).
PLUGIN = """#!{python}
import datetime, json, os, sys
here = os.path.dirname(os.path.abspath(__file__))
runs = os.path.join(here, "runs.jsonl")
count = sum(1 for _ in open(runs)) + 1 if os.path.exists(runs) else 1
with open(runs, "a") as out:
    told = json.loads(os.environ["KUBERNETES_EXEC_INFO"])
    out.write(json.dumps({{"info": told, "args": sys.argv[1:]}}) + "\\n")
lasts = float(os.environ["LIFETIME"])
until = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=lasts)
print(json.dumps({{
    "apiVersion": told["apiVersion"],
    "kind": "ExecCredential",
    "status": {{"token": f"tok-{{count}}", "expirationTimestamp": until.strftime("%Y-%m-%dT%H:%M:%SZ")}},
}}))
"""


def kubeconfig(directory: Path, server: str, command: str, **extra: Any) -> Path:
    plugin = {
        "apiVersion": "client.authentication.k8s.io/v1",
        "command": command,
        "args": ["--cluster", "c1"],
        "env": [{"name": "LIFETIME", "value": "4"}],  # renewed a quarter early: after 3 s
        "interactiveMode": "Never",
        "provideClusterInfo": True,
        **extra,
    }
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "eks",
        "contexts": [{"name": "eks", "context": {"cluster": "c", "user": "u"}}],
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": {"exec": plugin}}],
    }
    path = directory / "config"
    path.write_text(json.dumps(doc))  # JSON is YAML
    return path


@pytest.fixture
def guarded(tmp_path: Path) -> Any:
    """A fake API server that takes tokens tok-2 to tok-20 only."""
    server = FakeKubeApi(tmp_path / "kubeapi", tokens=tuple(f"tok-{n}" for n in range(2, 21)))
    server.start()
    try:
        yield server  # its namespace "default" is the kubeconfig's
    finally:
        server.remove()


def plugin_in(directory: Path) -> Path:
    (directory / "bin").mkdir()
    script = directory / "bin" / "plugin"
    script.write_text(PLUGIN.format(python=sys.executable))
    script.chmod(0o755)
    return script


@pytest.mark.anyio
async def test_an_elector_leads_on_a_plugins_tokens(guarded: FakeKubeApi, tmp_path: Path) -> None:
    plugin_in(tmp_path)
    config = kubeconfig(tmp_path, guarded.url, "./bin/plugin")  # relative to the kubeconfig
    driver = KubernetesDriver.from_url(f"k8s:///app?kubeconfig={config}", session_timeout=2)
    runs = tmp_path / "bin" / "runs.jsonl"
    async with driver, anyio.create_task_group() as tg:
        elector = Elector(driver, "/svc", "pod-0")
        tg.start_soon(elector.run, Recorder("pod-0", History()))
        await elector.wait_active()
        # tok-1 was refused (401): the plugin ran again at once; each token is renewed before
        # its expiry (here: 3 s after it was given), while the elector keeps leading
        with anyio.fail_after(20):
            while len(runs.read_text().splitlines()) < 4:
                await anyio.sleep(0.1)
        assert elector.state is State.ACTIVE
        elector.quit()
        await elector.wait_state(State.NEUTRAL)
        tg.cancel_scope.cancel()
    first = json.loads(runs.read_text().splitlines()[0])
    assert first["args"] == ["--cluster", "c1"]
    assert first["info"] == {
        "apiVersion": "client.authentication.k8s.io/v1",
        "kind": "ExecCredential",
        "spec": {"interactive": False, "cluster": {"server": guarded.url}},
    }


def test_a_missing_plugin_is_one_line_with_its_install_hint(
    guarded: FakeKubeApi, tmp_path: Path
) -> None:
    hint = "install it with `brew install aws-iam-authenticator`"
    config = kubeconfig(tmp_path, guarded.url, "./bin/nope", installHint=hint)
    env = ha_env(tmp_path, HA_URL=f"k8s:///app?kubeconfig={config}")
    line = one_error_line(ha("status", "/svc", env=env))
    assert line == (
        f"ha: error: the exec plugin '{tmp_path}/bin/nope' of the user of the context 'eks'"
        f" of {config} is not found: {hint}"
    )


def test_a_plugin_that_fails_says_why_in_one_line(guarded: FakeKubeApi, tmp_path: Path) -> None:
    (tmp_path / "bin").mkdir()
    script = tmp_path / "bin" / "plugin"
    script.write_text("#!/bin/sh\necho 'error: not logged in: run aws sso login' >&2\nexit 2\n")
    script.chmod(0o755)
    config = kubeconfig(tmp_path, guarded.url, str(script))
    env = ha_env(tmp_path, HA_URL=f"k8s:///app?kubeconfig={config}")
    line = one_error_line(ha("status", "/svc", env=env))
    assert line.endswith("failed (exit status 2): error: not logged in: run aws sso login")
