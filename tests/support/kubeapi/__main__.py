"""``python -m tests.support.kubeapi --port 0 [--state-file F] [--port-file P]``: run the fake.

It prints ``listening on http://127.0.0.1:PORT`` once it answers, and writes the port to
``--port-file`` (written to a temporary name, then renamed, so a reader never sees half of it).
SIGTERM or SIGINT stop it; every write is already in the state file, so SIGKILL loses nothing.
"""

from __future__ import annotations

import argparse
import os
import signal
import ssl
import sys
from pathlib import Path

from tests.support.kubeapi.auth import Auth, server_context
from tests.support.kubeapi.server import FakeApiServer
from tests.support.kubeapi.store import Store
from tests.support.kubeapi.watch import WatchSettings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.support.kubeapi",
        description="A FAKE Kubernetes API server (Namespaces, ConfigMaps, Leases, Events) for tests.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--state-file", type=Path, help="keep objects here across restarts")
    parser.add_argument("--port-file", type=Path, help="write the port here when ready")
    parser.add_argument(
        "--history",
        type=int,
        default=100,
        help="watch events kept per resource at least (older: 410; the watch cache's 100)",
    )
    parser.add_argument(
        "--history-max",
        type=int,
        default=1000,
        help="and at most, while they are fresh (a real server's: 102400)",
    )
    parser.add_argument(
        "--event-fresh",
        type=float,
        default=75.0,
        help="a history whose events are younger than this grows (the watch cache's 75 s)",
    )
    parser.add_argument(
        "--min-request-timeout",
        type=float,
        default=1800.0,
        help="watches without timeoutSeconds end after a random time in [T, 2T)",
    )
    parser.add_argument("--bookmark-interval", type=float, default=60.0)
    parser.add_argument(
        "--fresh-wait",
        type=float,
        default=3.0,
        help="a read from a future resourceVersion waits this long, then gets 504",
    )
    parser.add_argument("--tls-cert", type=Path, help="serve HTTPS with this certificate")
    parser.add_argument("--tls-key", type=Path, help="and this key")
    parser.add_argument("--client-ca", type=Path, help="accept client certificates from this CA")
    parser.add_argument("--token", action="append", default=[], help="a valid bearer token")
    parser.add_argument("--basic", action="append", default=[], help="a valid USER:PASSWORD")
    parser.add_argument("--verbose", action="store_true", help="log every request to stderr")
    args = parser.parse_args(argv)
    if args.history < 1:
        parser.error("--history must be at least 1")
    try:
        store = Store(args.state_file, args.history, args.history_max, args.event_fresh)
    except (OSError, ValueError, KeyError, TypeError, IndexError) as error:
        print(f"cannot use the state file {args.state_file}: {error}", file=sys.stderr)
        return 1
    if (args.tls_cert is None) != (args.tls_key is None):
        parser.error("--tls-cert and --tls-key go together")
    if args.client_ca is not None and args.tls_cert is None:
        parser.error("--client-ca needs --tls-cert and --tls-key")
    tls = None
    if args.tls_cert is not None:
        try:
            tls = server_context(args.tls_cert, args.tls_key, args.client_ca)
        except (OSError, ssl.SSLError) as error:
            print(f"cannot use the TLS files: {error}", file=sys.stderr)
            return 1
    auth = Auth(frozenset(args.token), frozenset(args.basic), args.client_ca is not None)
    settings = WatchSettings(args.min_request_timeout, args.bookmark_interval, args.fresh_wait)
    try:
        server = FakeApiServer(
            (args.host, args.port), store, settings, tls=tls, auth=auth, verbose=args.verbose
        )
    except (OSError, OverflowError) as error:
        reason = getattr(error, "strerror", None) or error
        print(f"cannot listen on {args.host}:{args.port}: {reason}", file=sys.stderr)
        return 1
    port = server.server_address[1]
    if args.port_file is not None:
        temporary = args.port_file.with_name(args.port_file.name + ".tmp")
        temporary.write_text(str(port))
        os.replace(temporary, args.port_file)
    print(f"listening on {'https' if tls else 'http'}://{args.host}:{port}", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        server.serve_forever(poll_interval=0.1)
    except (KeyboardInterrupt, SystemExit):
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
