"""Where the API server is and who the driver is to it: a kubeconfig, or the pod's account.

Order, as kubectl and client-go look: the ``kubeconfig`` option (one file); else the files of
``$KUBECONFIG`` (``:``-separated, merged: the first file that sets a value wins); else, inside
a pod (``KUBERNETES_SERVICE_HOST``), the service account mounted at ``SERVICE_ACCOUNT``;
else ``~/.kube/config``. A kubeconfig's current context is used unless ``context`` names one.

What a user entry may hold: a bearer token (``token``, ``tokenFile``), a client certificate
(``client-certificate[-data]`` and ``client-key[-data]``), user name and password (basic
auth), or an ``exec`` plugin that prints a token (``exec_auth.py``). An ``auth-provider``
plugin (the older, removed mechanism) is not run: the error says so, and how to get a token
instead. A cluster entry: ``server``, ``certificate-authority[-data]``,
``insecure-skip-tls-verify``. Every problem is one ``ConfigurationError`` naming the file.
"""

from __future__ import annotations

import base64
import os
import ssl
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ...errors import ConfigurationError
from .exec_auth import ExecPlugin, parse_exec

__all__ = ("SERVICE_ACCOUNT", "Cluster", "load")

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")


@dataclass(frozen=True, slots=True)
class Cluster:
    """An API server and the credentials to present to it."""

    server: str  # https://host:port (http only for a local fake)
    source: str  # where this came from, for messages
    namespace: str | None = None  # the context's (or the service account's) namespace
    ca_file: str | None = None
    ca_data: str | None = None  # PEM text
    cert_file: str | None = None
    key_file: str | None = None
    cert_data: bytes | None = None  # PEM
    key_data: bytes | None = None
    token: str | None = None
    token_file: str | None = None  # read at each connect (service account tokens rotate)
    basic: tuple[str, str] | None = None
    insecure: bool = False  # insecure-skip-tls-verify
    exec_plugin: ExecPlugin | None = None  # the user's exec section (``exec_auth.py``)

    def bearer(self) -> str | None:
        if self.token_file is not None:
            try:
                return Path(self.token_file).read_text().strip()
            except OSError as exc:
                raise ConfigurationError(
                    f"cannot read the Kubernetes token file {self.token_file}: {exc.strerror}"
                ) from None
        return self.token

    def ssl_context(self) -> ssl.SSLContext | bool:
        """What httpx should verify with: a context with our CA and client certificate."""
        if not self.server.startswith("https:"):
            return False
        context = ssl.create_default_context(cafile=self.ca_file, cadata=self.ca_data)
        if self.insecure:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        try:
            if self.cert_file is not None:
                context.load_cert_chain(self.cert_file, self.key_file)
            elif self.cert_data is not None:
                _load_pem_pair(context, self.cert_data, self.key_data)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigurationError(
                f"cannot load the client certificate of {self.source}: {exc}"
            ) from None
        return context


def _load_pem_pair(context: ssl.SSLContext, cert: bytes, key: bytes | None) -> None:
    """ssl loads certificates from files only: a private directory, removed at once."""
    with tempfile.TemporaryDirectory(prefix="ha-k8s-") as directory:
        cert_path, key_path = Path(directory, "cert.pem"), Path(directory, "key.pem")
        cert_path.write_bytes(cert)
        if key is not None:
            key_path.touch(mode=0o600)
            key_path.write_bytes(key)
        context.load_cert_chain(cert_path, key_path if key is not None else None)


def load(kubeconfig: str | None = None, context: str | None = None) -> Cluster:
    """The cluster to talk to (see the module's docstring for the order)."""
    if kubeconfig is not None:
        return from_kubeconfig([Path(kubeconfig).expanduser()], context)
    env = os.environ.get("KUBECONFIG")
    if env:
        files = [Path(p).expanduser() for p in env.split(os.pathsep) if p]
        return from_kubeconfig(files, context, "$KUBECONFIG")
    if os.environ.get("KUBERNETES_SERVICE_HOST") and context is None:
        return in_cluster()
    default = Path("~/.kube/config").expanduser()
    if default.exists():
        return from_kubeconfig([default], context)
    raise ConfigurationError(
        "no Kubernetes configuration: give ?kubeconfig=FILE, set KUBECONFIG, or run in a pod"
        " with a service account (KUBERNETES_SERVICE_HOST is not set, ~/.kube/config is absent)"
    )


def in_cluster(account: Path = SERVICE_ACCOUNT) -> Cluster:
    """The pod's service account: the API server's address from the environment."""
    host = os.environ.get("KUBERNETES_SERVICE_HOST", "")
    port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
    token = account / "token"
    if not token.exists():
        raise ConfigurationError(
            f"in a pod (KUBERNETES_SERVICE_HOST={host}) without a service account token at"
            f" {token}: set automountServiceAccountToken, or give ?kubeconfig=FILE"
        )
    namespace = account / "namespace"
    ca = account / "ca.crt"
    return Cluster(
        server=f"https://{'[' + host + ']' if ':' in host else host}:{port}",
        source=f"the service account at {account}",
        namespace=namespace.read_text().strip() if namespace.exists() else None,
        ca_file=str(ca) if ca.exists() else None,
        token_file=str(token),
    )


def from_kubeconfig(files: list[Path], context: str | None, named: str = "") -> Cluster:
    """The cluster of ``context`` (or the current one) in the merged kubeconfig ``files``."""
    source = named or str(files[0])
    merged: dict[str, dict[str, Any]] = {"clusters": {}, "users": {}, "contexts": {}}
    current: str | None = None
    found = False
    for path in files:
        doc = _read(path)
        if doc is None:
            continue
        found = True
        current = current or doc.get("current-context") or None
        for kind, entries in merged.items():
            for item in doc.get(kind) or []:
                if isinstance(item, dict) and isinstance(item.get("name"), str):
                    entries.setdefault(item["name"], {**item, "_file": path})
    if not found:
        raise ConfigurationError(f"the kubeconfig {source} does not exist")
    chosen = context or current
    if not chosen:
        raise ConfigurationError(f"the kubeconfig {source} has no current-context: give ?context=")
    ctx = _section(merged["contexts"], chosen, "context", source)
    cluster = _section(merged["clusters"], ctx.get("cluster"), "cluster", source)
    user = _section(merged["users"], ctx.get("user"), "user", source) if ctx.get("user") else {}
    return _cluster(cluster, user, ctx.get("namespace"), f"context {chosen!r} of {source}")


def _read(path: Path) -> dict[str, Any] | None:
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ConfigurationError(f"cannot read the kubeconfig {path}: {exc.strerror}") from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        line = f" (line {where.line + 1})" if where is not None else ""
        raise ConfigurationError(f"the kubeconfig {path} is not valid YAML{line}") from None
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise ConfigurationError(f"the kubeconfig {path} is not a kubeconfig (not a mapping)")
    return doc


def _section(entries: dict[str, Any], name: object, kind: str, source: str) -> dict[str, Any]:
    entry = entries.get(name) if isinstance(name, str) else None
    body = entry.get(kind) if entry else None
    if not isinstance(body, dict):
        known = ", ".join(sorted(entries)) or "none"
        raise ConfigurationError(f"no {kind} {name!r} in the kubeconfig {source} (known: {known})")
    return {**body, "_file": entry["_file"]} if entry else body


def _cluster(
    cluster: dict[str, Any], user: dict[str, Any], namespace: object, source: str
) -> Cluster:
    server = cluster.get("server")
    if not isinstance(server, str) or not server.startswith(("https://", "http://")):
        raise ConfigurationError(f"the {source} has no https:// server (got {server!r})")
    if "auth-provider" in user:
        raise ConfigurationError(
            f"the user of the {source} gets its credentials from an auth-provider plugin,"
            " which ha does not run: use an exec plugin (kubelogin, gke-gcloud-auth-plugin),"
            " put a token (kubectl create token ...) or a client certificate in the"
            " kubeconfig, or run in a pod with a service account"
        )
    base = cluster["_file"].parent
    ubase = user["_file"].parent if "_file" in user else base
    plugin = None
    if "exec" in user:
        plugin = parse_exec(user["exec"], f"user of the {source}", ubase, cluster)
    basic = None
    if user.get("username") is not None:
        basic = (str(user.get("username")), str(user.get("password") or ""))
    return Cluster(
        server=server.rstrip("/"),
        source=source,
        namespace=namespace if isinstance(namespace, str) and namespace else None,
        ca_file=_file(cluster.get("certificate-authority"), base),
        ca_data=_data(cluster.get("certificate-authority-data"), source, text=True),
        cert_file=_file(user.get("client-certificate"), ubase),
        key_file=_file(user.get("client-key"), ubase),
        cert_data=_data(user.get("client-certificate-data"), source),
        key_data=_data(user.get("client-key-data"), source),
        token=str(user["token"]) if user.get("token") else None,
        token_file=_file(user.get("tokenFile"), ubase),
        basic=basic,
        insecure=bool(cluster.get("insecure-skip-tls-verify")),
        exec_plugin=plugin,
    )


def _file(value: object, relative_to: Path) -> str | None:
    """A path from a kubeconfig: relative paths are relative to the file that holds them."""
    if not value:
        return None
    path = Path(str(value)).expanduser()
    return str(path if path.is_absolute() else relative_to / path)


def _data(value: object, source: str, *, text: bool = False) -> Any:
    if not value:
        return None
    try:
        raw = base64.b64decode(str(value), validate=True)
    except ValueError:
        raise ConfigurationError(f"the {source} has a *-data field that is not base64") from None
    return raw.decode("ascii", "replace") if text else raw
