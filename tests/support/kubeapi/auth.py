"""Who may talk to the fake: TLS and the three credentials a kubeconfig can carry.

A real API server listens on HTTPS only and answers a request without a valid credential
with 401 Unauthorized (a Status whose message is just "Unauthorized"). The fake does so when
started with any of ``--token``, ``--basic USER:PASSWORD`` or ``--client-ca`` (then a client
certificate signed by that CA is a credential); without them it takes anyone, as a
local test server should. ``/healthz`` and the admin endpoint never ask.

RBAC is not modelled: a 403 Forbidden comes from the fault hooks (``fail(code=403)``).
"""

from __future__ import annotations

import base64
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.kubeapi.status import ApiError

__all__ = ("Auth", "server_context")


@dataclass(frozen=True)
class Auth:
    tokens: frozenset[str] = frozenset()
    basic: frozenset[str] = frozenset()  # "user:password"
    client_certificates: bool = False

    @property
    def required(self) -> bool:
        return bool(self.tokens or self.basic or self.client_certificates)

    def check(self, authorization: str | None, peer: dict[str, Any] | None) -> None:
        """Raise 401 unless the request carries one valid credential."""
        if not self.required:
            return
        if self.client_certificates and peer:  # verified by the TLS layer against the CA
            return
        scheme, _, value = (authorization or "").partition(" ")
        if scheme.lower() == "bearer" and value.strip() in self.tokens:
            return
        if scheme.lower() == "basic":
            try:
                pair = base64.b64decode(value.strip(), validate=True).decode()
            except ValueError:
                pair = ""
            if pair in self.basic:
                return
        raise ApiError(401, "Unauthorized", "Unauthorized")


def server_context(cert: Path, key: Path, client_ca: Path | None) -> ssl.SSLContext:
    """HTTPS for the fake; with ``client_ca``, client certificates are asked for (optional:
    a client may still come with a token instead)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    if client_ca is not None:
        context.load_verify_locations(client_ca)
        context.verify_mode = ssl.CERT_OPTIONAL
    return context
