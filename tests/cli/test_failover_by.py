"""`ha failover` names who asked: the real user, by uid, even without ``$USER`` or a terminal
(cron, systemd, `kubectl exec`). Real processes on the sqlite backend."""

from __future__ import annotations

import os
import pwd
import socket
from pathlib import Path

from tests.support.cli import Hosts, ha


def test_failover_names_the_real_user_with_user_and_logname_unset(tmp_path: Path) -> None:
    user = pwd.getpwuid(os.getuid()).pw_name
    with Hosts(tmp_path) as hosts:
        hosts.start("a")
        hosts.settled()
        hosts.start("b")
        assert hosts.settled()["active"] == "a"
        env = {k: v for k, v in hosts.env.items() if k not in ("USER", "LOGNAME")}
        result = ha("failover", "/svc", env=env)  # no terminal either: stdin is a pipe
        assert result.returncode == 0, result.stderr
        doc = hosts.settled()
        assert doc["active"] == "b"
        by = doc["failover"]["by"]
        assert by.startswith(f"{user}@{socket.gethostname()}:"), by
        assert f"graceful failover to any standby asked by {by}: ceding" in hosts.log("a")
