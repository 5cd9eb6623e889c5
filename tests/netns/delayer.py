"""Delays a host's packets in user space, so that they also overtake each other: the kernel
queues every packet of the host's eth0 (iptables' NFQUEUE target, in the host's network
namespace) to this process, which gives each its verdict (accept) after a delay drawn from
[DELAY - JITTER, DELAY + JITTER] ms: with a jitter wider than the gap between two packets,
the later one may leave first. Where the kernel has ``tc netem`` the rounds use it instead;
this machine's kernel has not, and has no nft ``queue`` expression either.

    ip netns exec HOST python tests/netns/delayer.py QUEUE DELAY_MS JITTER_MS SEED

It prints ``ready`` once bound to the queue. SIGTERM lets every held packet go and exits; a
queue with no process bound lets packets through (``--queue-bypass``). Standard library only:
nfnetlink_queue spoken over a netlink socket (``linux/netfilter/nfnetlink_queue.h``).
"""

from __future__ import annotations

import errno
import heapq
import random
import select
import signal
import socket
import struct
import sys
import time

NETLINK_NETFILTER = 12
NFNL_SUBSYS_QUEUE = 3
NFQNL_MSG_PACKET, NFQNL_MSG_VERDICT, NFQNL_MSG_CONFIG = 0, 1, 2
NFQA_CFG_CMD, NFQA_CFG_PARAMS = 1, 2
NFQA_PACKET_HDR, NFQA_VERDICT_HDR = 1, 2
NFQNL_CFG_CMD_BIND = 1
NFQNL_COPY_META = 1  # the packet's metadata only: its id is all a verdict needs
NF_ACCEPT = 1
NLM_F_REQUEST = 1
NLMSG_HEADER = struct.Struct("=IHHII")  # length, type, flags, sequence, port


def attribute(kind: int, payload: bytes) -> bytes:
    length = 4 + len(payload)
    return struct.pack("=HH", length, kind) + payload + b"\0" * (-length % 4)


def message(kind: int, queue: int, *attributes: bytes) -> bytes:
    # nfgenmsg: family, version 0, the queue number (big-endian)
    body = struct.pack("!BBH", socket.AF_UNSPEC, 0, queue) + b"".join(attributes)
    kind = (NFNL_SUBSYS_QUEUE << 8) | kind
    return NLMSG_HEADER.pack(NLMSG_HEADER.size + len(body), kind, NLM_F_REQUEST, 0, 0) + body


def packet_ids(data: bytes) -> list[int]:
    """The ids of the packets in one read of the socket."""
    ids, offset = [], 0
    while offset + NLMSG_HEADER.size <= len(data):
        length, kind, _, _, _ = NLMSG_HEADER.unpack_from(data, offset)
        if length < NLMSG_HEADER.size:
            break
        if kind == (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET:
            at, end = offset + NLMSG_HEADER.size + 4, offset + length
            while at + 4 <= end:
                size, what = struct.unpack_from("=HH", data, at)
                if size < 4:
                    break
                if what & 0x3FFF == NFQA_PACKET_HDR:
                    ids.append(struct.unpack_from("!I", data, at + 4)[0])
                at += size + (-size % 4)
        offset += length + (-length % 4)
    return ids


def main(queue: int, delay: float, jitter: float, seed: str) -> None:
    rng = random.Random(seed)
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 22)
    sock.bind((0, 0))
    sock.send(
        message(
            NFQNL_MSG_CONFIG,
            queue,
            attribute(NFQA_CFG_CMD, struct.pack("!BxH", NFQNL_CFG_CMD_BIND, 0)),
        )
    )
    sock.send(
        message(
            NFQNL_MSG_CONFIG,
            queue,
            attribute(NFQA_CFG_PARAMS, struct.pack("!IB", 0, NFQNL_COPY_META)),
        )
    )
    held: list[tuple[float, int, int]] = []  # (when, arrival, packet id)
    arrivals = 0
    running = True

    def stop(signum: int, frame: object) -> None:
        nonlocal running
        running = False

    signal.signal(signal.SIGTERM, stop)
    print("ready", flush=True)
    while running or held:
        now = time.monotonic()
        while held and (held[0][0] <= now or not running):
            _, _, packet = heapq.heappop(held)
            verdict = struct.pack("!II", NF_ACCEPT, packet)
            sock.send(message(NFQNL_MSG_VERDICT, queue, attribute(NFQA_VERDICT_HDR, verdict)))
        if not running:
            break
        wait = max(0.0, held[0][0] - now) if held else 0.5
        try:
            readable, _, _ = select.select([sock], [], [], wait)
        except InterruptedError:
            continue
        if not readable:
            continue
        try:
            data = sock.recv(1 << 16)
        except OSError as exc:
            if exc.errno == errno.ENOBUFS:  # the kernel dropped some: they are lost, as on a link
                continue
            raise
        for packet in packet_ids(data):
            arrivals += 1
            hold = max(0.0, rng.uniform(delay - jitter, delay + jitter)) / 1000
            heapq.heappush(held, (time.monotonic() + hold, arrivals, packet))


if __name__ == "__main__":
    main(int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), sys.argv[4])
