#!/usr/bin/env python3
"""wireshark_hostile.py DIR: captures that once broke the dissector
(review helper-40), built byte by byte (198.18.0.0/15 addresses only):

  split.pcap     200 valid frames on one TCP connection, its byte stream cut
                 at random points: each frame must be decoded once (2 were;
                 a frame cut in its connection's first segment was "not
                 ringfire");
  trailing.pcap  a HEARTBEAT and 16 bytes of junk declaring 4 GiB in one
                 segment, then 20 HEARTBEATs and a REFUSE: the junk is
                 marked, the rest decoded (it swallowed the connection);
  foreign.pcap   another protocol's connection whose first bytes read as a
                 plausible header (kind 14, 1 MiB): not taken as ringfire;
  later.pcap     a later version's kind (25) between two HEARTBEATs: shown
                 as a frame, the HEARTBEAT after it too (it hid the rest
                 of its segment as junk);
  reuse.pcap     a keyed, MACed connection refused at AUTH step 2 (its
                 REFUSE unsealed, §1.8.2), then a plain one on the same
                 addresses and ports: neither REFUSE nor the GEOMETRY is
                 read as carrying a tag.
"""
import os
import random
import socket
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from capture_udp import fold  # noqa: E402

A, B = "198.18.0.1", "198.18.0.2"


def checksum(b):
    return ~fold(b) & 0xFFFF  # the Internet checksum (capture_udp's one's-complement sum)


def ipv4(src, dst, proto, payload):
    h = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(payload), 1, 0x4000, 64, proto, 0,
                    socket.inet_aton(src), socket.inet_aton(dst))
    return h[:10] + struct.pack("!H", checksum(h)) + h[12:] + payload


def tcp_packet(src, sport, dst, dport, seq, ack, flags, data):
    t = struct.pack("!HHIIBBHHH", sport, dport, seq & 0xFFFFFFFF, ack & 0xFFFFFFFF, 5 << 4, flags, 65535, 0, 0) + data
    pseudo = socket.inet_aton(src) + socket.inet_aton(dst) + struct.pack("!BBH", 0, 6, len(t))
    t = t[:16] + struct.pack("!H", checksum(pseudo + t)) + t[18:]
    return b"\x02\0\0\0\0\x01\x02\0\0\0\0\x02\x08\x00" + ipv4(src, dst, 6, t)


class Capture:
    def __init__(self, path):
        self.f = open(path, "wb")
        self.f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 262144, 1))
        self.n = 0

    def add(self, packet):
        self.n += 1
        self.f.write(struct.pack("<IIII", 1700000000, self.n, len(packet), len(packet)) + packet)

    def close(self):
        self.f.close()


class Connection:
    """One TCP connection from the mirror (client) to the source, SYN first."""

    def __init__(self, cap, cport, sport, isn=1000):
        self.cap, self.cport, self.sport = cap, cport, sport
        self.c, self.s = isn, isn + 4000
        cap.add(tcp_packet(B, cport, A, sport, self.c, 0, 0x02, b""))
        self.c += 1
        cap.add(tcp_packet(A, sport, B, cport, self.s, self.c, 0x12, b""))
        self.s += 1
        cap.add(tcp_packet(B, cport, A, sport, self.c, self.s, 0x10, b""))

    def client(self, data):
        self.cap.add(tcp_packet(B, self.cport, A, self.sport, self.c, self.s, 0x18, data))
        self.c += len(data)

    def source(self, data):
        self.cap.add(tcp_packet(A, self.sport, B, self.cport, self.s, self.c, 0x18, data))
        self.s += len(data)


def frame(kind, body=b"", flags=0, count=0, seq=0, length=None):
    return struct.pack("<BBHIQ", kind, flags, count, len(body) if length is None else length, seq) + body


def hello(flags, extra=b""):
    return frame(1, struct.pack("<IHHQ", 0x524D4652, 1, flags, 0) + extra)


def refuse(reason, text):
    return frame(13, struct.pack("<HH", reason, 0) + text)


def split(path):
    random.seed(7)
    cap = Capture(path)
    c = Connection(cap, 41240, 7400)
    c.client(hello(0x0C))
    frames = []
    for i in range(199):
        k = i % 4
        if k == 0:
            frames.append(frame(5, seq=i))
        elif k == 1:
            frames.append(frame(6, struct.pack("<Q", i + 5), seq=i))
        elif k == 2:
            n = random.randint(1, 5)
            frames.append(frame(3, b"".join(struct.pack("<I", 3) + b"abc" for _ in range(n)), count=n, seq=i))
        else:
            frames.append(refuse(6, b"x" * random.randint(0, 40)))
    stream = b"".join(frames)
    cuts = [0, 10] + sorted(random.sample(range(11, len(stream)), 150)) + [len(stream)]
    for a, b in zip(cuts, cuts[1:]):
        c.source(stream[a:b])
    cap.close()


def trailing(path):
    cap = Capture(path)
    c = Connection(cap, 41241, 7401)
    c.client(hello(0x0C))
    c.source(frame(5, seq=1))
    c.source(frame(5, seq=2) + b"\x63\x00\x00\x00\xff\xff\xff\xff" + b"G" * 8)
    for i in range(20):
        c.source(frame(5, seq=10 + i))
    c.source(refuse(8, b"protocol violation"))
    cap.close()


def foreign(path):
    cap = Capture(path)
    c = Connection(cap, 41242, 50001)
    c.client(b"\x0e\x9a\x7c\x33\x00\x00\x10\x00" + bytes(range(0x80, 0xB0)))
    for i in range(10):
        c.client(bytes([0xF0 + i]) + b"\xaa" * 40)
    cap.close()


def later(path):
    cap = Capture(path)
    c = Connection(cap, 41244, 7403)
    c.client(hello(0x0C))
    c.source(frame(5, seq=1) + frame(25, b"x" * 100) + frame(5, seq=2))
    cap.close()


def reuse(path):
    cap = Capture(path)
    c = Connection(cap, 41243, 7402)
    c.client(hello(0xA0, b"\x01" * 32))                              # keyed, asks for the frame MAC
    c.source(frame(11, b"\x01\x01" + b"\x00" * 6 + b"\x02" * 96))     # step 1, granting it
    c.client(frame(11, b"\x02" + b"\x00" * 7 + b"\x03" * 32))         # step 2 (the source finds it wrong)
    c.source(refuse(5, b"authentication failed: wrong key"))          # unsealed
    cap.add(tcp_packet(A, 7402, B, 41243, c.s, c.c, 0x11, b""))       # the source's FIN only
    c = Connection(cap, 41243, 7402, isn=90000)                       # the same ports again
    c.client(hello(0x0C))
    c.source(frame(2, struct.pack("<QIIQIIQQQ", 1024, 64, 0, 0, 16, 0, 4096, 8192, 0)))
    c.source(refuse(6, b"busy: the connection cap"))
    cap.close()


if __name__ == "__main__":
    out = sys.argv[1]
    for name, build in (("split", split), ("trailing", trailing), ("foreign", foreign), ("later", later), ("reuse", reuse)):
        build(os.path.join(out, name + ".pcap"))
