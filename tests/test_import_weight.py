"""What a process loads is what it runs (issue 31: an idle standby's resident memory).

``import ha`` loads the package alone; its public names come on first use (PEP 562). A
process standing by on etcd loads the elector and the etcd driver, and none of the services,
stores, memory backend, membership, metrics, HTTP, pipeline or report, nor ``importlib.metadata``
(email, zipfile, csv: only ``ha --version`` needs it). Each check runs in a fresh interpreter:
this one has imported everything already.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support.backends.etcd import EtcdServer
from tests.support.cli import ha_env, popen_ha, stop_procs, wait_until

# packages a standby never runs: loaded, each costs resident memory in every contender process
NOT_FOR_A_STANDBY = (
    "ha.admin",
    "ha.drivers.memory",
    "ha.http",
    "ha.membership",
    "ha.metrics",
    "ha.pipeline",
    "ha.report",
    "ha.services",
    "ha.stores",
    "ha.supervisor",
    "importlib.metadata",
    "email",
)


def run(code: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    return done.stdout.splitlines()


def loaded(code: str) -> tuple[list[str], list[str]]:
    """What ``code`` printed, and the modules a fresh interpreter holds after it."""
    *printed, last = run(code + "\nimport json, sys; print(json.dumps(sorted(sys.modules)))")
    modules: list[str] = json.loads(last)
    return printed, modules


def heavy(modules: list[str]) -> list[str]:
    return [m for m in modules if m.split(".")[0] == "email" or m.startswith(NOT_FOR_A_STANDBY)]


def test_import_ha_loads_the_package_alone() -> None:
    _, modules = loaded("import ha")
    assert [m for m in modules if m == "ha" or m.startswith("ha.")] == ["ha", "ha._lazy"]
    assert heavy(modules) == []


def test_public_names_still_load_on_use() -> None:
    code = textwrap.dedent(
        """
        import types
        import ha
        assert ha.stores.Stores and ha.election.nodes  # subpackages, as eager imports left them
        from ha import Elector, Lease, connect
        from ha import *  # noqa: F403
        assert Elector is ha.election.elector.Elector and Lease is ha.Lease
        assert connect is ha.drivers.connect and callable(ha.open_services)
        assert isinstance(ha.errors, types.ModuleType) and ha.State.ACTIVE
        assert set(ha.__all__) <= set(dir(ha))
        try:
            ha.Electer
        except AttributeError as exc:
            print(exc)
        """
    )
    assert run(code) == ["module 'ha' has no attribute 'Electer'"]


def test_the_deprecated_call_works_after_import_ha_services_alone() -> None:
    code = (
        "import warnings, ha.services\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        "    built = ha.services('none://', 'c1')\n"
        "print(type(built).__name__, caught[0].category.__name__)"
    )
    assert run(code) == ["HAServices DeprecationWarning"]


STANDBY = textwrap.dedent(
    """
    import sys
    import anyio
    import ha

    class Contender:
        async def become_active(self, lease: ha.Lease) -> None:
            await anyio.sleep_forever()

    async def main(url: str) -> None:
        async with ha.connect(url) as driver:
            leader = ha.Elector(driver, "/weight", "leader")
            standby = ha.Elector(driver, "/weight", "standby")
            async with anyio.create_task_group() as tg:
                await tg.start(leader.run, Contender())
                await leader.wait_active()
                await tg.start(standby.run, Contender())
                await standby.wait_state(ha.State.STANDBY)
                print(leader.state.name, standby.state.name)
                tg.cancel_scope.cancel()

    anyio.run(main, sys.argv[1], backend=sys.argv[2])
    """
)


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_an_etcd_standby_loads_only_what_it_runs(
    etcd_server: EtcdServer, backend: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    prefix = tmp_path_factory.mktemp("weight").name
    url = f"etcd://{etcd_server.hosts}/{prefix}"
    code = f"import sys; sys.argv[1:] = [{url!r}, {backend!r}]\n" + STANDBY
    printed, modules = loaded(code)
    assert printed == ["ACTIVE STANDBY"]
    assert "ha.election.elector" in modules and "ha.drivers.etcd.driver" in modules
    assert heavy(modules) == []


# `ha` as the console script runs it, writing the modules it holds to argv[1] at its exit
DUMPING_HA = textwrap.dedent(
    """
    import atexit, json, sys

    out = sys.argv.pop(1)

    def dump() -> None:
        with open(out, "w") as f:
            json.dump(sorted(sys.modules), f)

    atexit.register(dump)
    sys.argv[0] = "ha"
    from ha.cli import main

    main()
    """
)

# what `ha run` without --http never runs: the endpoint, the metrics beside its stand-in, and
# the packages of the services and the jobs
NOT_FOR_HA_RUN = (
    "ha.drivers.memory",
    "ha.http.endpoints",
    "ha.http.jobs",
    "ha.http.page",
    "ha.metrics.backend",
    "ha.metrics.election",
    "ha.metrics.process",
    "ha.pipeline",
    "ha.report",
    "ha.services",
    "ha.stores",
    "importlib.metadata",
    "email",
)


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_ha_run_standing_by_loads_no_metrics_nor_endpoint(
    etcd_server: EtcdServer, backend: str, tmp_path: Path
) -> None:
    env = ha_env(tmp_path, HA_URL=f"etcd://{etcd_server.hosts}/{tmp_path.name}")
    env["HA_ASYNC_BACKEND"] = backend
    run = ("run", "/svc", "--id")
    procs = [popen_ha(*run, "a", "--", "sleep", "600", env=env, log=tmp_path / "a.log")]
    try:
        wait_until(lambda: "-> active" in (tmp_path / "a.log").read_text(), "a active")
        with open(tmp_path / "b.log", "wb") as log:
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-c", DUMPING_HA, str(tmp_path / "b.json"), *run, "b"]
                    + ["--", "sleep", "600"],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    env=env,
                )
            )
        wait_until(lambda: "-> standby" in (tmp_path / "b.log").read_text(), "b standing by")
    finally:
        stop_procs(reversed(procs))
    modules = json.loads((tmp_path / "b.json").read_text())
    assert "ha.supervisor" in modules and "ha.drivers.etcd.driver" in modules
    assert [m for m in modules if m.split(".")[0] == "email" or m.startswith(NOT_FOR_HA_RUN)] == []
