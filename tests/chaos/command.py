"""COMMAND for ``ha run`` in the supervised chaos rounds: acts on the witness until stopped.

It has no lease: the supervisor must stop it before anyone else can take over. Its fenced writes
use a fence of its own making from ``HA_NODE`` (the leader's queue node must still exist; the
transaction checks it), with ``HA_EPOCH`` as its token, as a program run by ``ha run`` would.

    ha run /svc --id a -- python tests/chaos/command.py WITNESS_FILE ANYIO_BACKEND
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import anyio

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import ha
from ha.errors import HAError
from tests.support.witness import Witness


async def main(witness_file: str) -> None:
    identity, epoch = os.environ["HA_IDENTITY"], int(os.environ["HA_EPOCH"])
    election, url, node = os.environ["HA_ELECTION"], os.environ["HA_URL"], os.environ["HA_NODE"]
    witness = Witness(witness_file, identity)
    while True:  # the backend may be busy or cut off: COMMAND must not exit for that
        try:
            async with ha.connect(url) as driver:
                if await driver.exists(node) is None:
                    await anyio.sleep_forever()  # already superseded: never act
                lease = ha.Lease(
                    election,
                    identity.encode(),
                    epoch,
                    driver.session_id or 0,
                    node,
                    lambda: True,  # no lease: acting is the supervisor's call
                )
                while True:
                    act = witness.act(lease)
                    if act is not None:
                        await witness.write(driver, lease, act)
                    await anyio.sleep(0.02)
        except HAError:
            await anyio.sleep(0.05)


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], backend=sys.argv[2])
