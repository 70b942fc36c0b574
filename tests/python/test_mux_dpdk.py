"""The Python module on DPDK: two Nodes in one process whose channels ride
a net_memif pair (one EAL, the server and the client vdev on one socket),
their control connections on loopback. Its own process: the EAL starts once.
Skips (exit 77) without DPDK in the build or without root."""
import atexit
import os
import shutil
import sys
import tempfile
import time
import unittest

import ringfire


class MuxOnDpdkFromPython(unittest.TestCase):
    def test_streams_ride_memif(self):
        consumer = ringfire.Node(instance_id=f"c-{os.getpid()}", control="127.0.0.1:0",
                                 dpdk_port=0, dpdk_ip="198.18.1.1")
        producer = ringfire.Node(instance_id=f"p-{os.getpid()}", control="127.0.0.1:0",
                                 dpdk_port=1, dpdk_ip="198.18.1.2", flush="manual")
        anchors = [consumer.create_anchor() for _ in range(20)]
        senders = [producer.attach(a.handle, consumer.control_address) for a in anchors]
        self.assertFalse(any(s.per_stream for s in senders))
        for t in range(50):
            for i, s in enumerate(senders):
                while s.send(f"s{i}t{t}".encode()) == "full":
                    producer.flush_batch()
                    time.sleep(0.0005)
            producer.flush_batch()
        for s in senders:
            self.assertTrue(s.finish())
        producer.flush_batch()
        for i, a in enumerate(anchors):
            got = []
            while True:
                item = a.recv(10.0)
                self.assertIsNotNone(item, f"stream {i} stalled after {len(got)}")
                kind, _, data = item
                if kind != "data":
                    self.assertEqual(kind, "finished", f"stream {i}")
                    break
                got.append(data)
            self.assertEqual(got, [f"s{i}t{t}".encode() for t in range(50)])
        self.assertTrue(producer.drain(5.0))
        st = consumer.stats()
        self.assertEqual(st["records_received"], 20 * 50)
        self.assertIn("dpdk", consumer.data_path)
        self.assertGreater(st["channel_datagrams"], 0)  # the channel's batches came by UDP over memif

        # A forward pass (a token on each of 64 streams, then flush_batch)
        # leaves the producer in one tx_burst on DPDK, many tokens to a datagram.
        anchors = [consumer.create_anchor() for _ in range(64)]
        senders = [producer.attach(a.handle, consumer.control_address) for a in anchors]
        producer.flush_batch()  # the OpenSlots
        time.sleep(0.2)
        before = producer.stats()
        for p in range(5):
            for i, s in enumerate(senders):
                self.assertEqual(s.send(f"{'x' * 32}s{i}p{p}".encode()), "sent")
            producer.flush_batch()
            for i, a in enumerate(anchors):
                item = a.recv(10.0)
                self.assertIsNotNone(item, f"stream {i} pass {p}")
                self.assertEqual(item[2], f"{'x' * 32}s{i}p{p}".encode())
        after = producer.stats()
        self.assertEqual(after["channel_tx_bursts"] - before["channel_tx_bursts"], 5)
        datagrams = after["channel_datagrams_out"] - before["channel_datagrams_out"]
        self.assertGreaterEqual(datagrams, 10)
        self.assertLessEqual(datagrams * 16, 64 * 5, f"{datagrams} datagrams for 320 tokens")

    def test_a_bad_dpdk_option_says_what_to_change(self):
        with self.assertRaisesRegex(ValueError, "dpdk_port needs dpdk_ip"):
            ringfire.Node(instance_id="x", control="127.0.0.1:0", dpdk_port=0)
        with self.assertRaisesRegex(ValueError, "dpdk_ip needs dpdk_port"):
            ringfire.Node(instance_id="x", control="127.0.0.1:0", dpdk_ip="198.18.1.9")


if __name__ == "__main__":
    if not ringfire.has_dpdk or os.geteuid() != 0:
        print("test_mux_dpdk: no DPDK in this build, or not root: skipped")
        sys.exit(77)
    sock_dir = tempfile.mkdtemp(prefix="rfpy")
    atexit.register(shutil.rmtree, sock_dir, True)
    sock = os.path.join(sock_dir, "memif.sock")
    ringfire.start_dpdk(f"-l 0 --no-huge -m 256 --no-pci --no-shconf --file-prefix rfpy{os.getpid()} "
                        f"--vdev net_memif0,role=server,socket={sock},socket-abstract=no "
                        f"--vdev net_memif1,role=client,socket={sock},socket-abstract=no")
    unittest.main()
