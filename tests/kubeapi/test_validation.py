"""The FAKE API server's validation: 422 Invalid with causes, and 400 for bodies that cannot
decode, as kube-apiserver answers them; raw HTTP on asyncio and trio (no real apiserver here)."""

from __future__ import annotations

import base64

import httpx
import pytest

from tests.support.kubeapi.paths import config_maps, invalid, lease, leases

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("name", ["Upper", "under_score", "-dash", "dot.", "a" * 254, "sp ace"])
async def test_names_must_be_dns_subdomains(
    http: httpx.AsyncClient, kube_namespace: str, name: str
) -> None:
    answer = await http.post(config_maps(kube_namespace), json={"metadata": {"name": name}})
    assert await invalid(answer) == ["metadata.name"]


async def test_good_names(http: httpx.AsyncClient, kube_namespace: str) -> None:
    for name in ("a", "a.b-c", "0x", "a" * 253):
        answer = await http.post(config_maps(kube_namespace), json={"metadata": {"name": name}})
        assert answer.status_code == 201, answer.text
    nameless = await http.post(config_maps(kube_namespace), json={"metadata": {}})
    assert await invalid(nameless) == ["metadata.name"]


async def test_generate_name_appends_five_characters_to_at_most_58(
    http: httpx.AsyncClient, kube_namespace: str
) -> None:
    """apiserver/pkg/storage/names/generate.go ``simpleNameGenerator``: the prefix cut to
    63 - 5 characters, then apimachinery util/rand ``String(5)``, drawn from
    "bcdfghjklmnpqrstvwxz2456789" (no vowels, no 0, 1 or 3)."""
    for prefix in ("g-", "p" * 70):
        body = {"metadata": {"generateName": prefix}}
        answer = await http.post(config_maps(kube_namespace), json=body)
        assert answer.status_code == 201, answer.text
        name = answer.json()["metadata"]["name"]
        kept = prefix[:58]
        assert name.startswith(kept) and len(name) == len(kept) + 5
        assert set(name[len(kept) :]) <= set("bcdfghjklmnpqrstvwxz2456789")


async def test_config_map_keys_size_and_duplicates(
    http: httpx.AsyncClient, kube_namespace: str
) -> None:
    bad_key = {"metadata": {"name": "c"}, "data": {"bad key!": "v", "good.key_-1": "v"}}
    assert await invalid(await http.post(config_maps(kube_namespace), json=bad_key)) == [
        "data[bad key!]"
    ]
    both = {
        "metadata": {"name": "c"},
        "data": {"k": "v"},
        "binaryData": {"k": base64.b64encode(b"v").decode()},
    }
    # pkg/apis/core/validation/validation.go ValidateConfigMap reports it on data[k]; so does
    # a real server: 'data[myname]: Invalid value: "myname": duplicate of key present in
    # binaryData'
    answer = await http.post(config_maps(kube_namespace), json=both)
    assert await invalid(answer) == ["data[k]"]
    message = answer.json()["message"]
    assert 'data[k]: Invalid value: "k": duplicate of key present in binaryData' in message
    half = 512 * 1024
    at_limit = {
        "metadata": {"name": "full"},
        "data": {"a": "x" * half},
        "binaryData": {"b": base64.b64encode(b"y" * half).decode()},
    }
    assert (await http.post(config_maps(kube_namespace), json=at_limit)).status_code == 201
    over = dict(at_limit, metadata={"name": "over"}, data={"a": "x" * (half + 1)})
    answer = await http.post(config_maps(kube_namespace), json=over)
    await invalid(answer)
    assert "must have at most 1048576 bytes" in answer.json()["message"]
    not_base64 = {"metadata": {"name": "c"}, "binaryData": {"k": "%%%"}}
    assert (await http.post(config_maps(kube_namespace), json=not_base64)).status_code == 400


async def test_the_one_mebibyte_counts_values_only(
    http: httpx.AsyncClient, kube_namespace: str
) -> None:
    """ValidateConfigMap adds up ``len(value)`` of data and binaryData (the decoded bytes),
    never the keys, against ``core.MaxSecretSize`` (1 MiB): a ConfigMap whose values fill it
    to the byte is accepted however long its keys; one byte more is 422 on the whole object
    ("[]: Too long: must have at most 1048576 bytes", as real servers word it)."""
    keys = [f"{index:03d}." + "k" * 249 for index in range(64)]  # 253 characters each
    share = 1024 * 1024 // len(keys)
    full = {"metadata": {"name": "full"}, "data": dict.fromkeys(keys, "v" * share)}
    answer = await http.post(config_maps(kube_namespace), json=full)
    assert answer.status_code == 201, answer.text[:200]
    over = dict(full, metadata={"name": "over"}, data={**full["data"], "one": "x"})
    answer = await http.post(config_maps(kube_namespace), json=over)
    assert await invalid(answer) == ["[]"]
    assert answer.json()["message"].endswith("[]: Too long: must have at most 1048576 bytes")


async def test_lease_spec(http: httpx.AsyncClient, kube_namespace: str) -> None:
    zero = await http.post(leases(kube_namespace), json=lease("l", leaseDurationSeconds=0))
    assert await invalid(zero) == ["spec.leaseDurationSeconds"]  # kubernetes/kubernetes#88194
    negative = await http.post(leases(kube_namespace), json=lease("l", leaseTransitions=-1))
    assert await invalid(negative) == ["spec.leaseTransitions"]
    both = await http.post(
        leases(kube_namespace), json=lease("l", leaseDurationSeconds=-1, leaseTransitions=-1)
    )
    assert await invalid(both) == ["spec.leaseDurationSeconds", "spec.leaseTransitions"]
    good = lease(
        "l",
        acquireTime="2026-11-24T13:00:00.000000Z",
        renewTime="2026-11-24T13:00:01.123456+01:00",
        leaseTransitions=3,
    )
    created = await http.post(leases(kube_namespace), json=good)
    assert created.status_code == 201, created.text
    assert created.json()["spec"]["renewTime"] == "2026-11-24T13:00:01.123456+01:00"


@pytest.mark.parametrize(
    "when",
    [
        "2026-11-24T13:00:00Z",
        "2026-11-24T13:00:00.123Z",
        "2026-11-24 13:00:00.000000Z",
        "yesterday",
        5,
    ],
)
async def test_micro_time_needs_six_fraction_digits(
    http: httpx.AsyncClient, kube_namespace: str, when: object
) -> None:
    # the real server fails these while decoding (Go's time.Parse with RFC3339Micro): 400
    answer = await http.post(leases(kube_namespace), json=lease("l", renewTime=when))
    assert answer.status_code == 400, answer.text
    assert answer.json()["reason"] == "BadRequest"
    assert "cannot be handled as a Lease" in answer.json()["message"]


async def test_int32_fields_must_be_numbers(http: httpx.AsyncClient, kube_namespace: str) -> None:
    for value in ("2", 2.5, 2**31, True):
        answer = await http.post(
            leases(kube_namespace), json=lease("l", leaseDurationSeconds=value)
        )
        assert answer.status_code == 400, (value, answer.text)


async def test_immutable_config_map(http: httpx.AsyncClient, kube_namespace: str) -> None:
    body = {"metadata": {"name": "c"}, "data": {"k": "v"}, "immutable": True}
    assert (await http.post(config_maps(kube_namespace), json=body)).status_code == 201
    changed = dict(body, data={"k": "w"})
    assert await invalid(await http.put(f"{config_maps(kube_namespace)}/c", json=changed)) == [
        "data"
    ]
