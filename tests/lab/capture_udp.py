#!/usr/bin/env python3
"""capture_udp.py — the wire-format check of the lab: prints, as JSON, the
headers of the first DATA datagram (kind 3) to DST_IP:DST_PORT seen on
IFACE, and its UDP payload with what a source draws at random zeroed (the
session byte; a trailing TAG frame's session byte and tag, which are
reported apart as "tag": its kind and zero count and length, or null), for
tests that compare what two sources send.

    capture_udp.py IFACE DST_IP DST_PORT TIMEOUT_S

A UDP checksum is "ok", "none", "partial" (the pseudo-header's sum only:
what a kernel leaves for a NIC to finish, seen raw on a veth) or "bad".
"""
import json
import socket
import struct
import sys
import time


def fold(b):
    if len(b) % 2:
        b += b"\0"
    t = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while t >> 16:
        t = (t & 0xFFFF) + (t >> 16)
    return t


def main():
    iface, dst, port, timeout = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.ntohs(0x0003))
    s.bind((iface, 0))
    print("capturing", file=sys.stderr, flush=True)  # bound: what is sent from now on is seen
    # TIMEOUT_S bounds the whole capture, not each read: other traffic
    # (heartbeats) would otherwise keep it waiting for ever.
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            print(json.dumps({"error": f"no DATA to {dst}:{port} on {iface} within {timeout} s"}))
            return 1
        s.settimeout(left)
        try:
            f = s.recv(65535)
        except socket.timeout:
            continue
        if len(f) < 42 or f[12:14] != b"\x08\x00" or f[23] != 17:
            continue
        ihl = (f[14] & 15) * 4
        ip = f[14:14 + ihl]
        udp = f[14 + ihl:]
        if socket.inet_ntoa(ip[16:20]) != dst or struct.unpack("!H", udp[2:4])[0] != port:
            continue
        total = struct.unpack("!H", ip[2:4])[0]
        ulen = struct.unpack("!H", udp[4:6])[0]
        payload = bytearray(udp[8:ulen])
        if not payload or payload[0] != 3:
            continue  # not DATA (a heartbeat)
        payload[1] = 0
        tag = None
        if len(payload) >= 32 and payload[-16] == 18:  # a TAG frame last (PROTOCOL.md §1.8.1)
            tail = payload[-16:]
            tag = {"count_len_zero": tail[2:8] == bytes(6), "session_matches": tail[1] == udp[8 + 1],
                   "nonzero": tail[8:16] != bytes(8)}
            payload[-15] = 0
            payload[-8:] = bytes(8)
        pseudo = ip[12:20] + struct.pack("!BBH", 0, 17, ulen)
        field = struct.unpack("!H", udp[6:8])[0]
        if field == 0:
            check = "none"
        elif fold(pseudo + udp[:ulen]) == 0xFFFF:
            check = "ok"
        elif field == fold(pseudo):
            check = "partial"
        else:
            check = "bad"
        print(json.dumps({
            "eth_dst": f[0:6].hex(), "ethertype": f[12:14].hex(), "ip_version_ihl": ip[0], "ip_tos": ip[1],
            "ip_total_length_ok": total == ihl + ulen, "ip_flags_fragment": struct.unpack("!H", ip[6:8])[0],
            "ip_ttl": ip[8], "ip_checksum_ok": fold(ip) == 0xFFFF, "udp_checksum": check,
            "payload": bytes(payload).hex(), "tag": tag}, sort_keys=True))
        return 0


if __name__ == "__main__":
    sys.exit(main())
