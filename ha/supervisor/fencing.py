"""What ``--fence CMD`` is told about the old active: its breadcrumb as environment variables.

``HA_OLD_BREADCRUMB_B64`` always (``HA_OLD_BREADCRUMB_VALID`` says whether it could be read);
from a readable one ``HA_OLD_IDENTITY``, ``HA_OLD_EPOCH`` (when known) and
``HA_OLD_DATA_B64``; and, when ``ha run`` wrote it, ``HA_OLD_HOST`` and ``HA_OLD_PID``: where the
old supervisor ran, for a fence command that goes and stops it.
"""

from __future__ import annotations

import base64
import json

from ..election.names import decode_breadcrumb

__all__ = ("old_active_env",)


def old_active_env(breadcrumb: bytes) -> dict[str, str]:
    """The variables describing the old active of ``breadcrumb``."""
    env = {"HA_OLD_BREADCRUMB_B64": base64.b64encode(breadcrumb).decode()}
    crumb = decode_breadcrumb(breadcrumb)
    env["HA_OLD_BREADCRUMB_VALID"] = "1" if crumb is not None else "0"
    if crumb is None:
        return env
    env["HA_OLD_IDENTITY"] = crumb.identity.decode("utf-8", "replace")
    if crumb.epoch is not None:  # the old leader's token, when it could be known
        env["HA_OLD_EPOCH"] = str(crumb.epoch)
    env["HA_OLD_DATA_B64"] = base64.b64encode(crumb.data).decode()
    try:  # written by `ha run`: where the old supervisor ran
        info = json.loads(crumb.data)
        env["HA_OLD_HOST"] = str(info["host"])
        env["HA_OLD_PID"] = str(int(info["pid"]))
    except (ValueError, TypeError, KeyError):
        pass
    return env
