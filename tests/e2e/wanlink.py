"""A delaying Ethernet link in user space, for kernels without sch_netem.

    python3 wanlink.py IF_A IF_B --delay-ms 25 --jitter-ms 2

Every frame that arrives on IF_A leaves on IF_B (and back) `delay` later,
give or take `jitter`: the two interfaces behave as the ends of one long
cable. Frames keep their order in each direction (a frame never leaves
before the one received ahead of it), as on a real link and unlike
netem's jitter, which reorders and makes TCP retransmit.

The sockets carry virtio-net headers (PACKET_VNET_HDR) so that a veth's
segmentation offload passes through: a 64 KiB TCP super-frame is received
and sent as one, with its checksum still to be filled in, instead of being
refused as larger than the MTU.

Bounded: it exits when either interface goes away (a torn-down topology)
or when the process that started it is gone, so a killed test run leaves
no relay behind.
"""

import argparse
import collections
import os
import random
import socket
import sys
import threading
import time

ETH_P_ALL = 0x0003
SOL_PACKET = 263
PACKET_VNET_HDR = 15
PACKET_OUTGOING = 4
MAX_FRAME = 65536 + 64


def open_port(ifname):
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
    s.setsockopt(SOL_PACKET, PACKET_VNET_HDR, 1)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    s.bind((ifname, ETH_P_ALL))
    s.settimeout(0.5)
    return s


class Direction:
    """Frames from src, each sent on dst once its departure time comes."""

    def __init__(self, src, dst, delay_s, jitter_s, rng, stop):
        self.src, self.dst = src, dst
        self.delay_s, self.jitter_s, self.rng = delay_s, jitter_s, rng
        self.stop = stop
        self.queue = collections.deque()
        self.cv = threading.Condition()
        self.last_due = 0.0

    def receive(self):
        while not self.stop.is_set():
            try:
                frame, addr = self.src.recvfrom(MAX_FRAME)
            except socket.timeout:
                continue
            except OSError:
                break
            if addr[2] == PACKET_OUTGOING:  # what we sent ourselves
                continue
            now = time.monotonic()
            jitter = self.rng.uniform(-self.jitter_s, self.jitter_s) if self.jitter_s else 0.0
            due = max(self.last_due, now + self.delay_s + jitter)
            self.last_due = due
            with self.cv:
                self.queue.append((due, frame))
                self.cv.notify()
        self.stop.set()
        with self.cv:
            self.cv.notify()

    def send(self):
        while not self.stop.is_set():
            with self.cv:
                while not self.queue and not self.stop.is_set():
                    self.cv.wait(0.5)
                if self.stop.is_set():
                    break
                due, frame = self.queue[0]
            wait = due - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            with self.cv:
                self.queue.popleft()
            try:
                self.dst.send(frame)
            except OSError as e:
                if e.errno in (100, 105, 55):  # ENETDOWN, ENOBUFS, no buffer: a lost frame
                    continue
                break
        self.stop.set()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("if_a")
    p.add_argument("if_b")
    p.add_argument("--delay-ms", type=float, required=True, help="one way")
    p.add_argument("--jitter-ms", type=float, default=0.0, help="uniform, +/-")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    parent = os.getppid()
    a_sock, b_sock = open_port(a.if_a), open_port(a.if_b)
    stop = threading.Event()
    rng = random.Random(a.seed)
    threads = []
    for src, dst in ((a_sock, b_sock), (b_sock, a_sock)):
        d = Direction(src, dst, a.delay_ms / 1e3, a.jitter_ms / 1e3, rng, stop)
        threads += [threading.Thread(target=d.receive, daemon=True),
                    threading.Thread(target=d.send, daemon=True)]
    for t in threads:
        t.start()
    print("wanlink up", flush=True)
    while not stop.wait(0.5):
        if os.getppid() != parent:
            break
    stop.set()
    return 0


if __name__ == "__main__":
    sys.exit(main())
