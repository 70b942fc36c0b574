"""test_mux.py — the `ringfire` Python module from Python, as an inference
server would use it: two nodes on loopback, anchors, attach, a decode loop
(one token per stream, then flush_batch), finish, cancel, the per-stream
path, and every error a caller can make. Run with PYTHONPATH at the built
module (meson does)."""
import os
import threading
import time
import unittest

import ringfire


def node(name, **kw):
    return ringfire.Node(instance_id=f"{name}-{os.getpid()}-{time.monotonic_ns()}", control="127.0.0.1:0", **kw)


def send(sender, data, deadline_s=10.0):
    """send, retrying 'full' (the slot's byte budget) until credit comes back."""
    end = time.monotonic() + deadline_s
    while True:
        st = sender.send(data)
        if st != "full":
            return st
        if time.monotonic() > end:
            return st
        time.sleep(0.0001)


def counted(read, want, deadline_s=10.0):
    """read() once it reaches want, or at the deadline. A worker counts a
    datagram after its send returns, so the peer can hold the data before
    the counter moves: wait for it, then assert the exact figure."""
    end = time.monotonic() + deadline_s
    while read() < want and time.monotonic() < end:
        time.sleep(0.001)
    return read()


def one_stream(test, first):
    """two nodes and one stream between them that carried `first`:
    (consumer, producer, anchor, sender)."""
    consumer, producer = node("c"), node("p")
    a = consumer.create_anchor()
    s = producer.attach(a.handle, consumer.control_address)
    test.assertEqual(send(s, first), "sent")
    test.assertEqual(a.recv(10.0)[2], first)
    return consumer, producer, a, s


def drain(anchor, timeout=10.0):
    """every item of a single-sender anchor until its end: (data list, end kind)."""
    got = []
    while True:
        item = anchor.recv(timeout)
        if item is None:
            return got, None
        kind, _, data = item
        if kind != "data":
            return got, kind
        got.append(data)


class MuxFromPython(unittest.TestCase):
    def test_decode_loop_streams_arrive_in_order(self):
        consumer, producer = node("c"), node("p", flush="manual", initial_credit=16)
        anchors = [consumer.create_anchor() for _ in range(50)]
        senders = [producer.attach(a.handle, consumer.control_address) for a in anchors]
        self.assertFalse(any(s.per_stream for s in senders))
        tokens = 100

        def decode():
            for t in range(tokens):  # one decode step: a token for every stream, then flush
                for i, s in enumerate(senders):
                    self.assertEqual(send(s, f"s{i}t{t}".encode()), "sent")
                producer.flush_batch()
            for s in senders:
                self.assertTrue(s.finish())
            producer.flush_batch()

        th = threading.Thread(target=decode)
        th.start()
        for i, a in enumerate(anchors):
            got, end = drain(a)
            self.assertEqual(end, "finished", f"stream {i}")
            self.assertEqual(got, [f"s{i}t{t}".encode() for t in range(tokens)])
            self.assertIsNone(a.recv(0.05), "an item after the end")
        th.join()
        self.assertTrue(producer.drain(5.0))
        st = consumer.stats()
        self.assertEqual(st["records_received"], 50 * tokens)
        self.assertEqual(st["finished"], 50)
        self.assertEqual(st["reader_stall"], 0)
        self.assertLess(producer.stats()["batches_sent"], producer.stats()["records_sent"])  # batched
        # Every stream ended, was read, and was applied: the gauges are back to zero
        # (the credit of the last reads reaches the producer a conductor pass later).
        for _ in range(200):
            ps = producer.stats()
            if ps["live_slots"] + ps["outstanding_bytes"] + ps["withheld_bytes"] == 0:
                break
            time.sleep(0.01)
        self.assertEqual((ps["live_slots"], ps["outstanding_bytes"], ps["withheld_bytes"]), (0, 0, 0))
        st = consumer.stats()
        self.assertEqual((st["live_streams"], st["buffered_bytes"]), (0, 0))

    def test_jumbo_datagrams_carry_a_step_in_fewer_datagrams(self):
        # mtu=8972 (a 9000-byte link; loopback takes it): a step of 200
        # 16-byte tokens leaves in one datagram, not the three 1472 takes.
        consumer, producer = node("c", mtu=8972), node("p", flush="manual", mtu=8972)
        anchors = [consumer.create_anchor() for _ in range(200)]
        senders = [producer.attach(a.handle, consumer.control_address) for a in anchors]
        producer.flush_batch()
        time.sleep(0.2)
        before = producer.stats()["channel_datagrams_out"]
        for t in range(5):
            not_sent = producer.send_many([(s, b"%08d%08d" % (i, t)) for i, s in enumerate(senders)], flush=True)
            self.assertFalse(not_sent)  # every token taken
            for i, a in enumerate(anchors):
                self.assertEqual(a.recv(10.0)[2], b"%08d%08d" % (i, t))
        self.assertEqual(counted(lambda: producer.stats()["channel_datagrams_out"] - before, 5), 5)
        self.assertEqual(consumer.stats()["channel_tcp_records"], 0)

    def test_hot_workers_stream_and_readers_apply_their_channel(self):
        # idle="hot": the data plane's workers stay awake while tokens flow.
        consumer, producer = node("c", idle="hot"), node("p", idle="hot", flush="manual")
        a = consumer.create_anchor()
        s = producer.attach(a.handle, consumer.control_address)
        for t in range(200):
            self.assertEqual(send(s, f"t{t}".encode()), "sent")
            producer.flush_batch()
            kind, _, data = a.recv(10.0)  # a blocked reader applies the channel itself
            self.assertEqual((kind, data), ("data", f"t{t}".encode()))
        self.assertTrue(s.finish())
        producer.flush_batch()
        self.assertEqual(a.recv(10.0)[0], "finished")
        self.assertGreater(consumer.stats()["applied_by_readers"], 0)

    def test_cancel_closes_the_sender(self):
        consumer, producer, a, s = one_stream(self, b"x")
        self.assertFalse(s.wait_closed(0))
        a.cancel()
        # An hour: a cancel that did not wake it hangs the test (its timeout fails it).
        self.assertTrue(s.wait_closed(3600.0), "the cancel did not wake the producer's wait")
        self.assertEqual(s.send(b"late"), "closed")
        with self.assertRaises(ValueError):
            s.wait_closed(-1)

    def test_a_handles_ticket_opens_the_stream_with_no_attach(self):
        consumer, producer = node("c"), node("p")
        for r in range(2):  # a new peer, then a known one
            a = consumer.create_anchor()
            self.assertEqual(len(a.handle), 77)  # WORKER:ANCHOR and the ticket
            s = producer.attach(a.handle, consumer.control_address)
            self.assertEqual(send(s, b"first"), "sent")
            self.assertTrue(s.finish())
            producer.flush_batch()
            self.assertEqual(a.recv(10.0)[2], b"first")
            self.assertEqual(a.recv(10.0)[0], "finished")
        st = consumer.stats()
        self.assertEqual((st["attaches_answered"], st["tickets_claimed"]), (0, 2))
        self.assertEqual(producer.stats()["tickets_opened"], 2)
        # Spent: the same handle again opens a sender the consumer closes.
        again = producer.attach(a.handle, consumer.control_address)
        self.assertTrue(again.wait_closed(60.0), "a spent ticket's sender was not closed")
        self.assertEqual(consumer.stats()["unknown_anchor"], 1)
        # A node without tickets hands out the short form, answered by ATTACH.
        plain = node("c2", tickets=False)
        b = plain.create_anchor()
        self.assertEqual(len(b.handle), 33)
        s = producer.attach(b.handle, plain.control_address)
        self.assertEqual(send(s, b"asked"), "sent")
        producer.flush_batch()
        self.assertEqual(b.recv(10.0)[2], b"asked")
        self.assertEqual(plain.stats()["attaches_answered"], 1)

    def test_a_dropped_sender_ends_the_stream_dropped(self):
        consumer, producer = node("c"), node("p")
        a = consumer.create_anchor()
        s = producer.attach(a.handle, consumer.control_address)
        self.assertEqual(send(s, b"only"), "sent")
        del s  # gone without finish
        got, end = drain(a)
        self.assertEqual((got, end), ([b"only"], "dropped"))

    def test_multi_sender_anchor(self):
        consumer, p1, p2 = node("c"), node("p1"), node("p2")
        a = consumer.create_anchor(multi_sender=True)
        s1 = p1.attach(a.handle, consumer.control_address)
        s2 = p2.attach(a.handle, consumer.control_address)
        for s, tag in ((s1, b"a"), (s2, b"b")):
            self.assertEqual(send(s, tag), "sent")
            s.finish()
        by_session, ends = {}, 0
        while ends < 2:
            kind, session, data = a.recv(10.0)
            if kind == "finished":
                ends += 1
            else:
                by_session.setdefault(session, []).append(data)
        self.assertEqual(by_session, {s1.session: [b"a"], s2.session: [b"b"]})

    def test_per_stream_path(self):
        consumer, producer = node("c", mux=False), node("p")
        a = consumer.create_anchor()
        s = producer.attach(a.handle, consumer.control_address)
        self.assertTrue(s.per_stream)  # the consumer has the mux off: negotiation picked tcp
        for t in range(200):
            self.assertEqual(send(s, b"%d" % t), "sent")
        s.finish()
        got, end = drain(a)
        self.assertEqual(end, "finished")
        self.assertEqual(got, [b"%d" % t for t in range(200)])

    def test_a_pre_shared_key(self):
        import tempfile
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "key")
            with open(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
                f.write("k" * 40)
            consumer, producer = node("c", psk_file=path), node("p", psk_file=path)
            a = consumer.create_anchor()
            s = producer.attach(a.handle, consumer.control_address)
            self.assertEqual(send(s, b"keyed"), "sent")
            self.assertEqual(a.recv(10.0)[2], b"keyed")
            # A node without the key is refused on the control connection, and told why.
            with self.assertRaisesRegex(ConnectionError, "requires a pre-shared key"):
                node("stranger").attach(a.handle, consumer.control_address)
            self.assertGreaterEqual(consumer.stats()["unauthenticated"], 1)
            with open(os.open(os.path.join(d, "loose"), os.O_WRONLY | os.O_CREAT, 0o644), "w") as f:
                f.write("k" * 40)
            with self.assertRaises(ValueError):  # readable by others: refused, saying so
                node("bad", psk_file=os.path.join(d, "loose"))

    def test_close_stops_the_node_at_once_and_removes_its_rings(self):
        import tempfile
        with tempfile.TemporaryDirectory() as d:
            consumer, producer = node("c", ring_dir=d), node("p", ring_dir=d, flush="manual")
            a = consumer.create_anchor()
            s = producer.attach(a.handle, consumer.control_address)
            self.assertEqual(send(s, b"before"), "sent")
            producer.flush_batch()
            self.assertEqual(a.recv(10.0), ("data", s.session, b"before"))
            rings = os.listdir(d)
            self.assertTrue(any("mux-out" in r for r in rings), rings)  # the producer's egress ring
            producer.close()
            self.assertTrue(producer.closed)
            self.assertFalse(any("mux-out" in r for r in os.listdir(d)), os.listdir(d))
            self.assertTrue(s.closed)  # the sender outlives its node, closed
            self.assertEqual(s.send(b"after"), "closed")
            self.assertEqual(a.recv(10.0)[0], "dropped")  # the consumer saw the peer go
            with self.assertRaisesRegex(ValueError, "the node is closed"):
                producer.create_anchor()
            with self.assertRaisesRegex(ValueError, "the node is closed"):
                producer.poll()
            producer.close()  # again: nothing
            # A thread waiting on a node that is closed returns (within a
            # slice; it held the node for its whole wait: review helper-37).
            waited = []

            def wait():
                try:
                    waited.append(consumer.wait(600))
                except ValueError as e:  # it came after the close (a loaded machine): say so
                    waited.append(str(e))
            waiter = threading.Thread(target=wait)
            waiter.start()
            time.sleep(1.0)
            consumer.close()
            waiter.join(30)
            self.assertEqual(waited, [False])
            self.assertEqual(os.listdir(d), [])
            with node("w", ring_dir=d) as w:  # a with block closes it at its end
                w.create_anchor()
            self.assertTrue(w.closed)

    def test_ctrl_c_interrupts_a_blocking_call(self):
        # SIGINT while recv, wait_closed and wait block: KeyboardInterrupt
        # at once (it came only when the call returned: review helper-36).
        # Each waits up to 600 s: without it, the test's own timeout fails it.
        import signal
        consumer, producer = node("c"), node("p")
        a = consumer.create_anchor()
        s = producer.attach(a.handle, consumer.control_address)
        for call in (lambda: a.recv(600), lambda: s.wait_closed(600), lambda: consumer.wait(600)):
            timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT))
            timer.start()
            with self.assertRaises(KeyboardInterrupt):
                call()
            timer.join()
        self.assertEqual(send(s, b"after"), "sent")  # the node goes on
        self.assertEqual(a.recv(10.0)[2], b"after")

    def test_a_forked_child_neither_uses_nor_stops_its_parents_node(self):
        # The child has the node's memory and none of its threads: its calls
        # are refused, and dropping the objects leaves them be (it crashed at
        # exit, and read its parent's stream: review helper-36).
        import gc
        consumer, producer, a, s = one_stream(self, b"before")
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: report, drop everything, leave
            said = []
            for call in (lambda: s.send(b"child"), lambda: a.recv(0), lambda: consumer.create_anchor(),
                         lambda: producer.stats(), lambda: node("child").create_anchor()):
                try:
                    call()
                    said.append("ran")
                except RuntimeError as e:
                    said.append("refused" if "was made before fork()" in str(e) else str(e))
            os.write(w, ",".join(said).encode())
            del a, s, consumer, producer
            gc.collect()
            os._exit(0)
        os.close(w)
        _, status = os.waitpid(pid, 0)
        with os.fdopen(r) as f:
            said = f.read()
        self.assertEqual(said, "refused,refused,refused,refused,ran")  # a node of its own is its own
        self.assertTrue(os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status)
        self.assertEqual(send(s, b"after"), "sent")  # the parent's node goes on, its stream whole
        self.assertEqual(a.recv(10.0)[2], b"after")
        self.assertEqual(a.recv(0), None)

    def test_errors_say_what_to_change(self):
        with self.assertRaisesRegex(ValueError, "initial_credit"):
            node("bad", initial_credit=0)
        with self.assertRaisesRegex(ValueError, "flush"):
            node("bad", flush="sometimes")
        with self.assertRaisesRegex(ValueError, "idle warm: expected spin, yield, backoff or hot"):
            node("bad", idle="warm")
        with self.assertRaisesRegex(ValueError, "silent_peer must be 0 to 3600"):
            node("bad", silent_peer=-1)
        with self.assertRaisesRegex(ValueError, "silent_peer must be 0 to 3600"):
            node("bad", silent_peer=float("nan"))
        with self.assertRaisesRegex(ValueError, "resume_window must be 0 to 3600"):
            node("bad", resume_window=float("nan"))
        with self.assertRaisesRegex(ValueError, "1 to 1000000"):
            node("bad", flush="linger:99999999999999999")
        with self.assertRaisesRegex(ValueError, "mtu 100: the largest UDP payload, 256 to 65507"):
            node("bad", mtu=100)
        with self.assertRaises(ValueError):
            ringfire.Node(instance_id="x", control="not an address")
        n = node("n")
        with self.assertRaisesRegex(ValueError, "not a handle"):
            n.attach("junk", "127.0.0.1:1")
        with self.assertRaises(ConnectionError):
            n.attach("0123456789abcdef:0123456789abcdef", "127.0.0.1:1")  # nobody listens there
        with self.assertRaisesRegex(ValueError, "recv: seconds between 0 and 1e6"):
            n.create_anchor().recv(-1)
        with self.assertRaisesRegex(ValueError, "wait: seconds between 0 and 1e6"):
            n.wait(float("nan"))
        with self.assertRaisesRegex(ValueError, "drain: seconds between 0 and 1e6"):
            n.drain(1e30)
        with self.assertRaisesRegex(TypeError, "a sender is None"):  # it crashed the process
            n.send_many([None], [b"x"])
        with self.assertRaisesRegex(TypeError, "a sender is None"):
            n.send_many([(None, b"x")])

        class Untruthful:
            def __bool__(self):
                raise RuntimeError("no truth here")
        with self.assertRaisesRegex(RuntimeError, "no truth here"):
            n.send_many([], flush=Untruthful())


if __name__ == "__main__":
    unittest.main()
