"""How ``ha`` is installed: its distribution name on the package index, and the hint that
names an extra.

The import package and the command are ``ha``; the distribution is not, because ``ha`` on the
public index is another project (whose top-level package is also ``ha``): a hint naming ``ha``
with an extra installed that one. Every install hint comes from here, and
tests/packaging/test_distribution_name.py checks this name against pyproject.toml.
"""

from __future__ import annotations

__all__ = ("DISTRIBUTION", "install_hint", "version")

DISTRIBUTION = "ha-elector"


def install_hint(extra: str) -> str:
    """The command that installs ``extra`` (a ``[project.optional-dependencies]`` key)."""
    return f"pip install '{DISTRIBUTION}[{extra}]'"


def version() -> str:
    """The installed distribution's version (``ha --version``), or why there is none: run
    from a source tree that was never installed, or beside an older install of another name."""
    from importlib import metadata  # here: it loads email, zipfile and csv, which only this needs

    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return f"unknown ({DISTRIBUTION} is not installed)"
