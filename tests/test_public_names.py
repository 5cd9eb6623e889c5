"""``import ha.services`` gives the module (issue 14: the function of the same name shadowed
it); ``ha.open_services`` builds the services, and the old call still works, deprecated."""

from __future__ import annotations

import subprocess
import sys
import types

import pytest

import ha
import ha.services


def test_ha_services_is_the_module() -> None:
    assert isinstance(ha.services, types.ModuleType)
    assert ha.services.__name__ == "ha.services"
    assert ha.services.HAServices is ha.services.services("none://", "c1").__class__
    # as a fresh interpreter sees it, whatever the order of the imports
    code = "import ha.services, ha, types; print(isinstance(ha.services, types.ModuleType))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"


def test_open_services_and_the_deprecated_call() -> None:
    assert isinstance(ha.open_services("none://", "c1"), ha.services.HAServices)
    with pytest.deprecated_call(match=r"call ha\.open_services"):
        built = ha.services("none://", "c1")  # type: ignore[operator]
    assert isinstance(built, ha.services.HAServices)
