"""The user-space half of an emulated link: delay, jitter and loss between two interfaces.

This kernel has no ``netem`` (only ``tbf``/``htb`` shape rate), so delay and loss are added here. The relay
runs inside the switch namespace of a :class:`~storeval.testbed.network.Network` between two interfaces: ``u``
(the far end of the emulated host's veth, off the bridge) and ``r`` (a veth whose peer is a bridge port). Every
frame that arrives on one is sent out of the other after the link's one-way delay (``rtt/2``, ± ``jitter``,
order kept: a frame never leaves before the one received before it), unless the loss draw drops it.

Frames are read and written with ``AF_PACKET`` sockets and ``PACKET_VNET_HDR``: each frame comes with its
``virtio_net_hdr`` (GSO type and size, partial-checksum offsets), which is handed back when it is sent, so
a 64 KiB TCP segment that veth passes as one GSO frame crosses the relay as one frame, with its checksum still
to be completed by the kernel — without it, re-injected frames would carry bad checksums or exceed the MTU.
``PACKET_IGNORE_OUTGOING`` keeps the relay from reading what it sent itself.

Loss is per MTU-sized segment, as on a real link: a GSO frame of k segments loses something with probability
1-(1-p)^k; a TCP/IPv4 frame then loses only the segments drawn (:func:`cut_segments` writes the surviving runs
back as shorter frames), any other frame is dropped whole. ``dropped_loss`` counts segments.

One thread: ``select`` (microsecond timeouts, unlike ``epoll``) until the next frame's deadline (it never
spins), then a non-blocking drain of both sockets, then every frame whose time has come is sent. Each
direction's frames wait in a ring buffer of ``queue_bytes`` (received into it and sent from it, never copied);
a full ring drops, counted as ``dropped_queue``; a send the qdisc refuses (a full tbf) is retried shortly, as a
router's queue would. Settings (``rtt``, ``jitter``, ``loss``, ``rate``, ``queue_bytes``; see
:func:`read_settings`) come from a JSON file, read again on SIGHUP (a live change between cells). Statistics
are written atomically to a JSON file every half second and at exit: per direction (``up`` = u→r, from the
host; ``down`` = r→u, to the host) frames, bytes, dropped_loss, dropped_queue, dropped_send, queue_bytes,
queue_max_bytes and the delay really added (held_mean_s, held_p50_s, held_p90_s of the recent frames since the
settings last changed); at the top level the two directions together (dropped_loss, dropped_queue,
queue_bytes, held_mean_s). As root it asks for SCHED_FIFO priority 10, so a busy machine does not stretch the
delay.

Run: ``python -m storeval.testbed.relay --up-if U --down-if R --settings FILE --stats FILE``.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import errno
import json
import mmap
import os
import random
import select
import signal
import socket
import struct
import sys
import time
from typing import Any

ETH_P_ALL = 0x0003
SOL_PACKET = 263
PACKET_VNET_HDR = 15
PACKET_IGNORE_OUTGOING = 23
VNET_HDR = struct.Struct("<BBHHHH")  # flags, gso_type, hdr_len, gso_size, csum_start, csum_offset
FRAME_MAX = 256 << 10  # larger than any GSO frame veth hands over (64 KiB, or BIG TCP's more)
SOCK_BUF = 16 << 20
DEFAULT_QUEUE = 64 << 20  # bytes held per direction at most (50 ms of 10 Gbit/s)
MIN_QUEUE = 4 << 20
STATS_EVERY = 0.5
HELD_SAMPLES = 2048  # recent frames whose held time gives the median and p90
SEND_RETRY = 0.0005  # seconds before a send the qdisc refused (ENOBUFS) is tried again


def read_settings(path: str) -> dict[str, float]:
    """The link's settings: rtt, jitter (seconds), loss (fraction), rate (bytes/s, or null: unlimited) and
    queue_bytes (each direction's ring; by default twice what the rate, or 10 Gbit/s, carries in one way's
    delay, within 4–64 MiB: a page of the ring takes memory once a frame was held in it)."""
    with open(path) as f:
        d = json.load(f)
    out = {"rtt": float(d.get("rtt") or 0.0), "jitter": float(d.get("jitter") or 0.0),
           "loss": float(d.get("loss") or 0.0), "rate": float(d.get("rate") or 0.0)}
    in_flight = 2 * (out["rate"] or 1.25e9) * (out["rtt"] / 2 + out["jitter"])
    out["queue_bytes"] = float(d.get("queue_bytes") or min(max(in_flight + 4 * FRAME_MAX, MIN_QUEUE), DEFAULT_QUEUE))
    return out


def open_socket(ifname: str) -> socket.socket:
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    s.setsockopt(SOL_PACKET, PACKET_VNET_HDR, 1)
    s.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
    for opt, force in ((socket.SO_RCVBUF, 33), (socket.SO_SNDBUF, 32)):  # SO_RCVBUFFORCE / SO_SNDBUFFORCE as root
        try:
            s.setsockopt(socket.SOL_SOCKET, force, SOCK_BUF)
        except OSError:
            s.setsockopt(socket.SOL_SOCKET, opt, SOCK_BUF)
    s.bind((ifname, ETH_P_ALL))
    s.setblocking(False)
    return s


TCP_GSO = (1, 4)  # VIRTIO_NET_HDR_GSO_TCPV4, _TCPV6 (the ECN bit, 0x80, masked off)
ETH_IPV4 = b"\x08\x00"


def _fold(total: int) -> int:
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return total


def _pseudo(ip: bytes | memoryview, tcp_len: int) -> int:
    """The TCP pseudo-header's one's-complement sum (not complemented), as a partial checksum is seeded."""
    return _fold(sum(struct.unpack_from("!4H", ip, 12)) + 6 + tcp_len)


def cut_segments(view: memoryview, at: int, n: int, loss: float,
                 rng: random.Random) -> tuple[list[tuple[int, int]], int] | None:
    """Lose single MTU-sized segments of a TCP/IPv4 GSO frame held at ``view[at:at+n]``: each of its k segments
    is lost with probability ``loss`` (at least one: the caller drew that one is), and what survives is written
    back in place as shorter frames — runs of consecutive segments, each with its IP length, TCP sequence number,
    flags and partial checksum seed set as the kernel's own segmentation would. Returns ([(start, size)…],
    segments lost), or None when the frame is not one this can cut (then the whole frame is lost)."""
    flags, gso_type, _, gso_size, csum_start, csum_offset = VNET_HDR.unpack_from(view, at)
    eth = at + VNET_HDR.size
    if gso_type & 0x7F != 1 or not gso_size or bytes(view[eth + 12:eth + 14]) != ETH_IPV4:
        return None
    ip = eth + 14
    ihl = (view[ip] & 0x0F) * 4
    if view[ip + 9] != 6 or ihl < 20:
        return None
    tcp = ip + ihl
    thl = (view[tcp + 12] >> 4) * 4
    head = tcp + thl  # payload starts here
    payload = at + n - head
    if thl < 20 or payload <= gso_size:
        return None
    (check,) = struct.unpack_from("!H", view, tcp + 16)
    if check != _pseudo(view[ip:ip + 20], n - (tcp - at)):
        return None  # not seeded as expected: leave it to the whole-frame drop
    k = -(-payload // gso_size)
    lost = [rng.random() < loss for _ in range(k)]
    if not any(lost):
        lost[rng.randrange(k)] = True  # the caller's draw said at least one is lost
    runs, i = [], 0
    while i < k:
        if lost[i]:
            i += 1
            continue
        j = i
        while j < k and not lost[j]:
            j += 1
        runs.append((i, j))
        i = j
    header = bytes(view[at:head])  # vnet + ethernet + IP + TCP headers of the original
    data = bytes(view[head:at + n])
    (seq,) = struct.unpack_from("!I", header, tcp - at + 4)
    (ip_id,) = struct.unpack_from("!H", header, ip - at + 4)
    tcp_flags = header[tcp - at + 13]
    out, pos = [], at
    for a, b in runs:
        chunk = data[a * gso_size:min(b * gso_size, payload)]
        h = bytearray(header)
        segs = b - a
        if segs > 1:
            VNET_HDR.pack_into(h, 0, flags, gso_type, head - eth, gso_size, csum_start, csum_offset)
        else:
            VNET_HDR.pack_into(h, 0, flags, 0, head - eth, 0, csum_start, csum_offset)  # one segment: no GSO
        i0 = ip - at
        struct.pack_into("!H", h, i0 + 2, ihl + thl + len(chunk))
        struct.pack_into("!H", h, i0 + 4, (ip_id + a) & 0xFFFF)
        struct.pack_into("!H", h, i0 + 10, 0)
        struct.pack_into("!H", h, i0 + 10, 0xFFFF - _fold(sum(struct.unpack_from(f"!{ihl // 2}H", h, i0))))
        t0 = tcp - at
        struct.pack_into("!I", h, t0 + 4, (seq + a * gso_size) & 0xFFFFFFFF)
        f = tcp_flags
        if b < k:
            f &= ~0x09  # FIN and PSH only on the last segment
        if a > 0:
            f &= ~0x80  # CWR only on the first
        h[t0 + 13] = f
        struct.pack_into("!H", h, t0 + 16, _pseudo(h[i0:i0 + 20], thl + len(chunk)))
        size = len(h) + len(chunk)
        if pos + size > at + FRAME_MAX:
            return None
        view[pos:pos + len(h)] = h
        view[pos + len(h):pos + size] = chunk
        out.append((pos, size))
        pos += size
    return out, sum(lost)


class Direction:
    """Frames received on ``src`` waiting for their time to leave through ``dst``. They are held in a ring
    buffer in arrival order (first in, first out: the order is kept), received into it and sent from it with
    no copy in between; its size bounds the queue."""

    def __init__(self, name: str, src: socket.socket, dst: socket.socket, capacity: int) -> None:
        self.name, self.src, self.dst = name, src, dst
        self.ring = mmap.mmap(-1, capacity)  # anonymous: a page takes memory only once a frame was held in it
        self.view = memoryview(self.ring)
        self.capacity = self.wanted = capacity
        self.queue: collections.deque[tuple[float, float, int, int]] = collections.deque()  # (due, received, at, n)
        self.tail = 0  # where the next frame is received
        self.queued = 0
        self.last_due = 0.0
        self.frames = self.bytes = self.dropped_loss = self.dropped_queue = self.dropped_send = 0
        self.queue_max = 0
        self.held_sum = 0.0
        self.held_count = 0
        self.held_recent: collections.deque[float] = collections.deque(maxlen=HELD_SAMPLES)

    def resize(self, capacity: int) -> None:
        """Take a ring of ``capacity`` bytes once the queue is empty (at once if it is)."""
        self.wanted = capacity

    def room(self) -> int:
        """Where a frame of up to FRAME_MAX bytes can be received now (-1: the queue is full)."""
        if not self.queue:
            self.tail = 0
            if self.wanted != self.capacity:
                self.view.release()
                self.ring.close()
                self.ring = mmap.mmap(-1, self.wanted)
                self.view, self.capacity = memoryview(self.ring), self.wanted
            return 0
        head = self.queue[0][2]
        if self.tail > head:
            if self.capacity - self.tail >= FRAME_MAX:
                return self.tail
            return 0 if head >= FRAME_MAX else -1
        return self.tail if head - self.tail >= FRAME_MAX else -1

    def stats(self) -> dict[str, float]:
        recent = sorted(self.held_recent)
        pick = (lambda q: recent[min(len(recent) - 1, int(q * len(recent)))]) if recent else (lambda q: 0.0)
        return {"frames": self.frames, "bytes": self.bytes, "dropped_loss": self.dropped_loss,
                "dropped_queue": self.dropped_queue, "dropped_send": self.dropped_send,
                "queue_bytes": self.queued, "queue_max_bytes": self.queue_max,
                "held_mean_s": self.held_sum / self.held_count if self.held_count else 0.0,
                "held_p50_s": pick(0.5), "held_p90_s": pick(0.9)}


class Relay:
    def __init__(self, up_if: str, down_if: str, settings_file: str, stats_file: str) -> None:
        self.settings_file, self.stats_file = settings_file, stats_file
        self.settings = read_settings(settings_file)
        a, b = open_socket(up_if), open_socket(down_if)
        self.dirs = [Direction("up", a, b, self.capacity()), Direction("down", b, a, self.capacity())]
        self.by_fd = {a.fileno(): self.dirs[0], b.fileno(): self.dirs[1]}
        self.scratch = bytearray(FRAME_MAX)  # where a frame that finds the queue full is received and dropped
        self.rng = random.Random()
        self.reload = False
        self.stop = False
        self.started = time.time()
        self.reloads = 0

    def capacity(self) -> int:
        return int(max(self.settings["queue_bytes"], 4 * FRAME_MAX))

    def receive(self, d: Direction, now: float) -> None:
        """Drain ``d.src`` without blocking: each frame is queued with its deadline, or dropped."""
        one_way, jitter, loss = self.settings["rtt"] / 2, self.settings["jitter"], self.settings["loss"]
        recv_into, rng, queue = d.src.recv_into, self.rng, d.queue
        while True:
            at = d.room()
            view = d.view  # room() takes a new ring when asked to and the queue is empty
            try:
                n = recv_into(view[at:at + FRAME_MAX] if at >= 0 else self.scratch)
            except (BlockingIOError, InterruptedError):
                return
            if at < 0:
                d.dropped_queue += 1  # the ring is full: tail drop
                continue
            if n < VNET_HDR.size:
                continue
            pieces = None
            if loss > 0:
                _, gso_type, _, gso_size, _, _ = VNET_HDR.unpack_from(view, at)
                segments = max(1, -(-(n - VNET_HDR.size - 54) // gso_size)) if gso_type and gso_size else 1
                if rng.random() < 1 - (1 - loss) ** segments:
                    pieces = cut_segments(view, at, n, loss, rng) if segments > 1 else None
                    if pieces is None or not pieces[0]:  # the whole frame is lost
                        d.dropped_loss += segments
                        continue
                    d.dropped_loss += pieces[1]
            due = now + one_way
            if jitter > 0:
                due += rng.uniform(-jitter, jitter)
            if due < d.last_due:
                due = d.last_due  # order kept
            d.last_due = due
            for start, size in (pieces[0] if pieces else ((at, n),)):
                queue.append((due, now, start, size))
                d.tail = start + size
                d.queued += size
            if d.queued > d.queue_max:
                d.queue_max = d.queued

    def send_due(self, d: Direction, now: float) -> float | None:
        """Send every frame of ``d`` whose deadline has passed; the next deadline (None when empty)."""
        q, send, view = d.queue, d.dst.send, d.view
        while q:
            due, received, at, n = q[0]
            if due > now:
                return due
            try:
                send(view[at:at + n])
            except (BlockingIOError, InterruptedError):
                return now + SEND_RETRY
            except OSError as e:  # ENOBUFS: the qdisc (tbf) is full; try again shortly, as a real queue would
                if e.errno == errno.ENOBUFS:
                    return now + SEND_RETRY
                d.dropped_send += 1
            q.popleft()
            d.queued -= n
            d.frames += 1
            d.bytes += n - VNET_HDR.size
            held = now - received
            d.held_sum += held
            d.held_count += 1
            d.held_recent.append(held)
        return None

    def write_stats(self) -> None:
        up, down = self.dirs
        count = up.held_count + down.held_count
        data = {"pid": os.getpid(), "started": self.started, "time": time.time(), "settings": self.settings,
                "reloads": self.reloads, "up": up.stats(), "down": down.stats(),
                # both directions together, for readers that want one figure per link
                "dropped_loss": up.dropped_loss + down.dropped_loss, "dropped_queue": up.dropped_queue + down.dropped_queue,
                "queue_bytes": up.queued + down.queued,
                "held_mean_s": (up.held_sum + down.held_sum) / count if count else 0.0}
        tmp = f"{self.stats_file}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            json.dump(data, f)
        os.replace(tmp, self.stats_file)

    def run(self) -> None:
        fds = list(self.by_fd)  # select, not epoll: its timeout has microseconds, epoll's milliseconds
        next_stats = 0.0
        clock = time.monotonic
        while not self.stop:
            if self.reload:
                self.reload = False
                with contextlib.suppress(OSError, ValueError):
                    self.settings = read_settings(self.settings_file)
                    self.reloads += 1
                    for d in self.dirs:
                        d.resize(self.capacity())
                        d.held_sum, d.held_count = 0.0, 0  # the delay added under these settings, from now on
                        d.held_recent.clear()
            now = clock()
            wake = next_stats
            for d in self.dirs:
                due = self.send_due(d, now)
                if due is not None and due < wake:
                    wake = due
            if now >= next_stats:
                self.write_stats()
                next_stats = now + STATS_EVERY
                wake = min(wake, next_stats)
            try:
                ready, _, _ = select.select(fds, [], [], max(0.0, wake - clock()))
            except InterruptedError:
                continue
            if ready:
                now = clock()
                for fd in ready:
                    self.receive(self.by_fd[fd], now)
        self.write_stats()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m storeval.testbed.relay", description=__doc__.split("\n")[0])
    ap.add_argument("--up-if", required=True, help="interface toward the emulated host (u)")
    ap.add_argument("--down-if", required=True, help="interface toward the bridge (r)")
    ap.add_argument("--settings", required=True, help="JSON file: rtt, jitter, loss (seconds, fraction)")
    ap.add_argument("--stats", required=True, help="JSON file the statistics are written to")
    args = ap.parse_args(argv)
    relay = Relay(args.up_if, args.down_if, args.settings, args.stats)

    def on_hup(*_: Any) -> None:
        relay.reload = True

    def on_term(*_: Any) -> None:
        relay.stop = True

    signal.signal(signal.SIGHUP, on_hup)
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    if os.geteuid() == 0:
        with contextlib.suppress(OSError, AttributeError):
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))
    try:
        relay.run()
    except KeyboardInterrupt:
        relay.write_stats()
    sys.exit(0)


if __name__ == "__main__":
    main()
