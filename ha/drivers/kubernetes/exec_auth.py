"""Credentials from a kubeconfig's ``exec`` plugin (EKS, GKE, AKS...), as client-go runs them.

The protocol (client.authentication.k8s.io, v1 or v1beta1; k8s.io/client-go/plugin/pkg/client/
auth/exec): the user entry names a command, its arguments and extra environment; the client
runs it with ``KUBERNETES_EXEC_INFO`` set to an ``ExecCredential`` whose ``spec`` says whether
it may prompt (``interactive``; never here: ``ha`` runs as a service, with no terminal) and,
with ``provideClusterInfo``, the cluster (server, CA, TLS options). The command prints an
``ExecCredential`` of the same apiVersion whose ``status`` holds a ``token`` and, optionally,
an ``expirationTimestamp``. The token is kept until then (a little before, a quarter of its
life at most: a request must not leave with a token that runs out on the way) and the command
run again for the next request; an answer 401 runs it again at once (the token was revoked or
rotated), as client-go does. The run is not counted in the request's own time (a cloud CLI
may take seconds): a request waits for it, bounded by ``TIMEOUT``, and the session's local
deadline, counted from the last contact, keeps an active from outliving its session meanwhile.

A command without a path separator is looked up on ``PATH``; a relative one with a separator
is relative to the kubeconfig that names it (client-go resolves it the same way). Client
certificates from a plugin (``clientCertificateData``) are refused in one line: the driver's
TLS context is made once, at start.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio

from ...errors import ConfigurationError

__all__ = ("ExecCredentials", "ExecPlugin", "parse_exec")

VERSIONS = ("client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1")
MODES = ("Never", "IfAvailable", "Always")
EARLY = 10.0  # seconds before its expiry a token is renewed
TIMEOUT = 60.0  # seconds a plugin may take (a cloud CLI asks its metadata service)


@dataclass(frozen=True, slots=True)
class ExecPlugin:
    """A kubeconfig user's ``exec`` section, checked."""

    api_version: str
    command: str
    args: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    install_hint: str
    source: str  # "the kubeconfig F, user U": for messages
    cluster: dict[str, Any] | None = None  # told to the plugin (provideClusterInfo)


def parse_exec(section: object, source: str, base: Path, cluster: dict[str, Any]) -> ExecPlugin:
    """The plugin of a user entry's ``exec`` value, or one ``ConfigurationError``."""
    if not isinstance(section, dict):
        raise ConfigurationError(f"the {source}: exec must be a mapping")
    version = section.get("apiVersion")
    if version not in VERSIONS:
        raise ConfigurationError(
            f"the {source}: exec apiVersion {version!r} is not one ha speaks"
            f" ({', '.join(VERSIONS)})"
        )
    command = section.get("command")
    if not isinstance(command, str) or not command:
        raise ConfigurationError(f"the {source}: exec has no command")
    if os.sep in command and not Path(command).expanduser().is_absolute():
        command = str(base / command)
    args = section.get("args") or []
    env = section.get("env") or []
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise ConfigurationError(f"the {source}: exec args must be a list of strings")
    if not isinstance(env, list) or not all(
        isinstance(e, dict) and isinstance(e.get("name"), str) for e in env
    ):
        raise ConfigurationError(f"the {source}: exec env must be a list of {{name, value}}")
    mode = section.get("interactiveMode")
    if mode is None and version.endswith("/v1"):
        raise ConfigurationError(f"the {source}: exec needs interactiveMode with {version}")
    if mode is not None and mode not in MODES:
        raise ConfigurationError(
            f"the {source}: exec interactiveMode {mode!r} is not one of {', '.join(MODES)}"
        )
    if mode == "Always":
        raise ConfigurationError(
            f"the {source}: the exec plugin {command!r} always prompts (interactiveMode"
            " Always), and ha runs with no terminal: log in first, or use a token"
        )
    told = None
    if section.get("provideClusterInfo"):
        told = {
            "server": cluster.get("server"),
            "certificate-authority-data": cluster.get("certificate-authority-data"),
            "insecure-skip-tls-verify": bool(cluster.get("insecure-skip-tls-verify")),
        }
        told = {k: v for k, v in told.items() if v}
    return ExecPlugin(
        version,
        command,
        tuple(args),
        tuple((str(e["name"]), str(e.get("value") or "")) for e in env),
        str(section.get("installHint") or ""),
        source,
        told,
    )


class ExecCredentials:
    """The token of one plugin, run when there is none or it ran out (one run at a time)."""

    def __init__(self, plugin: ExecPlugin) -> None:
        self.plugin = plugin
        self._token: str | None = None
        self._until = float("inf")  # anyio time: renew from then on
        self._lock = anyio.Lock()
        self.runs = 0
        self.worked = False  # it gave a token once

    def forget(self, token: str) -> None:
        """``token`` was refused (401): the next request runs the plugin again."""
        if self._token == token:
            self._token = None

    async def token(self) -> str:
        async with self._lock:
            if self._token is None or anyio.current_time() >= self._until:
                self._token, lasts = await self._run()
                self._until = anyio.current_time() + lasts - min(EARLY, lasts / 4)
                self.worked = True
            return self._token

    async def _run(self) -> tuple[str, float]:
        """(the token, seconds it lasts) from one run of the plugin."""
        plugin = self.plugin
        spec: dict[str, Any] = {"interactive": False}
        if plugin.cluster is not None:
            spec["cluster"] = plugin.cluster
        info = {"apiVersion": plugin.api_version, "kind": "ExecCredential", "spec": spec}
        env = {**os.environ, **dict(plugin.env), "KUBERNETES_EXEC_INFO": json.dumps(info)}
        name = f"the exec plugin {plugin.command!r} of the {plugin.source}"
        self.runs += 1
        try:
            with anyio.fail_after(TIMEOUT):
                done = await anyio.run_process(
                    [plugin.command, *plugin.args],
                    env=env,
                    stdin=subprocess.DEVNULL,
                    check=False,
                )
        except FileNotFoundError:
            hint = f": {plugin.install_hint.strip()}" if plugin.install_hint else ""
            raise ConfigurationError(f"{name} is not found{hint}") from None
        except PermissionError:
            raise ConfigurationError(f"{name} is not executable") from None
        except TimeoutError:
            raise ConfigurationError(f"{name} gave no credential in {TIMEOUT:g} s") from None
        if done.returncode != 0:
            said = done.stderr.decode(errors="replace").strip().splitlines()
            why = f": {said[-1]}" if said else ""
            raise ConfigurationError(f"{name} failed (exit status {done.returncode}){why}")
        return _read(done.stdout, plugin.api_version, name)


def _read(out: bytes, version: str, name: str) -> tuple[str, float]:
    try:
        doc = json.loads(out)
        status = doc["status"]
        if doc.get("kind") != "ExecCredential" or not isinstance(status, dict):
            raise ValueError("not an ExecCredential")
    except (ValueError, KeyError, TypeError):
        raise ConfigurationError(f"{name} printed no ExecCredential with a status") from None
    if doc.get("apiVersion") != version:
        raise ConfigurationError(
            f"{name} answered {doc.get('apiVersion')!r}, asked for {version!r}"
        )
    token = status.get("token")
    if not isinstance(token, str) or not token:
        more = (
            " (client certificates from a plugin are not supported)"
            if (status.get("clientCertificateData"))
            else ""
        )
        raise ConfigurationError(f"{name} gave no token{more}")
    expiry = status.get("expirationTimestamp")
    if not expiry:
        return token, float("inf")
    try:
        when = datetime.fromisoformat(str(expiry).replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise ConfigurationError(f"{name}: expirationTimestamp {expiry!r} is not a time") from None
    return token, when - time.time()  # an expiry is a wall-clock time
