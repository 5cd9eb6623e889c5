"""A package's public names loaded on first use (PEP 562).

A package that re-exports its modules' names would load them all at its first import, though
a process uses a few: an elector never the services, ``ha run`` without ``--http`` never the
metrics' exposition nor the HTTP server. With ``lazy_names`` each name's module is imported
when the name is first read (``from ha import Elector`` too); then the name is a plain
attribute of the package. The package keeps its imports under ``if TYPE_CHECKING:`` for type
checkers, and binds the two functions only outside it, so that a misspelt name stays an error.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ("lazy_names",)


def lazy_names(
    package: str, where: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module ``__getattr__`` and ``__dir__`` of ``package``. ``where`` maps each public
    name to its module (``".server"``: the module itself) or to ``".server:serve"``, an
    attribute of it; relative names are under ``package``."""
    namespace = vars(sys.modules[package])

    def __getattr__(name: str) -> Any:
        try:
            module_name, _, attribute = where[name].partition(":")
        except KeyError:
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        value = importlib.import_module(module_name, package)
        if attribute:
            value = getattr(value, attribute)
        namespace[name] = value  # the next read is a plain attribute
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(where))

    return __getattr__, __dir__
