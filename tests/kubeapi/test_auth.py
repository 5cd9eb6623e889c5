"""The FAKE API server over HTTPS with credentials, as a real one always is: a request
without a valid bearer token, basic password or client certificate gets 401 Unauthorized.
Raw HTTP on asyncio and trio; no real apiserver runs here."""

from __future__ import annotations

import ssl

import httpx
import pytest

from tests.support.kubeapi.paths import leases
from tests.support.kubeapi.process import FakeKubeApi

pytestmark = pytest.mark.anyio


def trusting(server: FakeKubeApi, *, certificate: bool = False) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=server.ca_file)
    if certificate and server.certs is not None:
        context.load_cert_chain(server.certs / "client.pem", server.certs / "client.key")
    return context


async def test_credentials(secured: FakeKubeApi) -> None:
    assert secured.url.startswith("https://")
    path = leases("default")
    async with httpx.AsyncClient(base_url=secured.url, verify=trusting(secured)) as http:
        anonymous = await http.get(path)
        assert anonymous.status_code == 401
        assert (anonymous.json()["reason"], anonymous.json()["message"]) == (
            "Unauthorized",
            "Unauthorized",
        )
        wrong = await http.get(path, headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401
        token = await http.get(path, headers={"Authorization": "Bearer s3cret"})
        assert token.status_code == 200
        assert (await http.get(path, auth=("admin", "pw"))).status_code == 200
        assert (await http.get(path, auth=("admin", "no"))).status_code == 401
        assert (await http.get("/healthz")).status_code == 200  # health needs no credential
    certificate = trusting(secured, certificate=True)
    async with httpx.AsyncClient(base_url=secured.url, verify=certificate) as http:
        assert (await http.get(path)).status_code == 200


async def test_tls_is_required_and_checked(secured: FakeKubeApi) -> None:
    plain = secured.url.replace("https://", "http://")
    async with httpx.AsyncClient(base_url=plain) as http:
        with pytest.raises(httpx.TransportError):
            await http.get("/healthz")
    async with httpx.AsyncClient(base_url=secured.url) as http:  # the system's CAs only
        with pytest.raises(httpx.ConnectError):
            await http.get("/healthz")
    # and the server keeps serving after those failed handshakes
    token = {"Authorization": "Bearer s3cret"}
    assert secured.request("GET", "/version", headers=token)[0] == 200
