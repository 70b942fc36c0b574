"""test_aio.py — ringfire.aio and the calls under it (Node.fd, Node.poll,
Node.send_many, Anchor.pause/resume) from Python, two nodes on loopback:
one event loop reads many anchors through one descriptor, every token in
order; the descriptor is readable exactly when something waits; a paused
anchor holds back its own stream only; a dropped stream says why. Run
with PYTHONPATH at the built package (meson does)."""
import asyncio
import os
import select
import struct
import threading
import time
import unittest

import ringfire
import ringfire.aio


def node(name, **kw):
    return ringfire.Node(instance_id=f"{name}-{os.getpid()}-{time.monotonic_ns()}", control="127.0.0.1:0", **kw)


def readable(fd, timeout):
    return bool(select.select([fd], [], [], timeout)[0])


async def one_waiting_reader(consumer, producer):
    """an anchor of `consumer` in this loop, `producer`'s sender to it, and
    a reader task waiting in `anext` for its first item."""
    anode = ringfire.aio.AsyncNode(consumer)
    a = anode.create_anchor()
    loop = asyncio.get_running_loop()
    s = await loop.run_in_executor(None, producer.attach, a.handle, consumer.control_address)
    waiting = asyncio.ensure_future(anext(a))
    await asyncio.sleep(0.05)  # it waits
    return anode, a, s, waiting


class Aio(unittest.TestCase):
    def test_one_loop_reads_many_anchors_in_order(self):
        consumer, producer = node("c"), node("p", flush="manual", initial_credit=16)
        streams, tokens = 200, 60
        threads_before = threading.active_count()

        async def main():
            anode = ringfire.aio.AsyncNode(consumer)
            anchors = [anode.create_anchor() for _ in range(streams)]
            loop = asyncio.get_running_loop()
            senders = await loop.run_in_executor(
                None, lambda: [producer.attach(a.handle, consumer.control_address) for a in anchors])

            def produce():  # a decode loop: one step, one call
                for k in range(tokens):
                    step = [(s, struct.pack("<II", i, k)) for i, s in enumerate(senders)]
                    while True:
                        not_sent = producer.send_many(step, flush=True)
                        if not not_sent:
                            break
                        self.assertTrue(all(st == "full" for _, st in not_sent), not_sent)
                        step = [step[i] for i, _ in not_sent]  # retried in order: credit comes back
                        time.sleep(0.001)
                    time.sleep(0.002)
                for s in senders:
                    self.assertTrue(s.finish())
                producer.flush_batch()

            async def read(i, a):
                got = []
                async for data in a:
                    got.append(struct.unpack("<II", data))
                return got

            t = threading.Thread(target=produce)
            t.start()
            results = await asyncio.wait_for(asyncio.gather(*(read(i, a) for i, a in enumerate(anchors))), 60)
            await loop.run_in_executor(None, t.join)
            return results

        results = asyncio.run(main())
        for i, got in enumerate(results):
            self.assertEqual(got, [(i, k) for k in range(tokens)], f"stream {i}")
        st = consumer.stats()
        self.assertEqual(st["finished"], streams)
        self.assertEqual(st["records_received"], streams * tokens)
        # One descriptor for all of them: far fewer polls than tokens (a step's
        # tokens come in one), and no thread per anchor or per peer.
        self.assertLess(st["polls"], streams * tokens // 20, st)
        self.assertLessEqual(threading.active_count(), threads_before + 1)
        self.assertEqual(st["reader_stall"], 0)

    def test_the_descriptor_is_readable_exactly_when_an_item_waits(self):
        consumer, producer = node("c"), node("p", flush="manual")
        anchors = [consumer.create_anchor() for _ in range(50)]
        senders = [producer.attach(a.handle, consumer.control_address) for a in anchors]
        fd = consumer.fd()
        # The streams' OpenSlots go now: on tickets they wait for a flush
        # (Manual), and with the first token they made a second datagram that
        # could land after poll() took the token (readable, with no item).
        # Once they are in, nothing else arrives for a second (an idle slot's
        # first heartbeat waits two intervals), and this test is done by then.
        producer.flush_batch()
        time.sleep(0.3)
        consumer.poll()
        self.assertFalse(readable(fd, 0.2), "readable with nothing sent")
        senders[7].send(b"one")
        self.assertFalse(readable(fd, 0.2), "readable before the flush (Manual: nothing moved)")
        producer.flush_batch()
        self.assertTrue(readable(fd, 5.0), "not readable once a token came")
        items = consumer.poll()
        self.assertEqual(items, [(anchors[7].id, "data", senders[7].session, b"one")])
        self.assertFalse(readable(fd, 0.2), "still readable after poll() took everything")
        # More than one poll() takes: the descriptor stays readable for the rest.
        for s in senders:
            s.send(b"x")
        producer.flush_batch()
        self.assertTrue(readable(fd, 5.0))
        deadline = time.monotonic() + 5
        got = []
        while len(got) < 50 and time.monotonic() < deadline:
            if readable(fd, 1.0):
                got += consumer.poll(max=7)
        self.assertEqual(sorted(a for a, _, _, _ in got), sorted(a.id for a in anchors))
        self.assertFalse(readable(fd, 0.2))

    def test_a_paused_anchor_holds_back_its_own_stream_only(self):
        consumer, producer = node("c", initial_credit=8), node("p", flush="manual")
        slow, fast = consumer.create_anchor(), consumer.create_anchor()
        s_slow = producer.attach(slow.handle, consumer.control_address)
        s_fast = producer.attach(fast.handle, consumer.control_address)
        slow.pause()
        n = 100
        for k in range(n):
            self.assertEqual(s_slow.send(b"s%d" % k), "sent")
            self.assertEqual(s_fast.send(b"f%d" % k), "sent")
            producer.flush_batch()
        got = {slow.id: [], fast.id: []}

        def read_until(anchor_id):  # poll until that anchor's n items are in (10 s at most)
            deadline = time.monotonic() + 10
            while len(got[anchor_id]) < n and time.monotonic() < deadline:
                consumer.wait(0.5)
                for a, kind, _, data in consumer.poll():
                    got[a].append(data)

        read_until(fast.id)
        self.assertEqual(got[fast.id], [b"f%d" % k for k in range(n)])
        self.assertEqual(got[slow.id], [], "a paused anchor's items came out")
        # Resumed: its stream arrives whole, in order (credit held it back).
        slow.resume()
        read_until(slow.id)
        self.assertEqual(got[slow.id], [b"s%d" % k for k in range(n)])

    def test_a_dropped_stream_says_why_and_send_many_reports_each_record(self):
        consumer, producer = node("c"), node("p", flush="manual")

        async def main():
            anode = ringfire.aio.AsyncNode(consumer)
            a, b = anode.create_anchor(), anode.create_anchor()
            loop = asyncio.get_running_loop()
            sa = await loop.run_in_executor(None, producer.attach, a.handle, consumer.control_address)
            sb = await loop.run_in_executor(None, producer.attach, b.handle, consumer.control_address)
            self.assertIsNone(producer.send_many([(sa, b"a0"), (sb, b"b0")], flush=True))
            self.assertEqual(await a.recv(), ("data", sa.session, b"a0"))
            self.assertEqual(await anext(b), b"b0")
            b.cancel()
            closed = await loop.run_in_executor(None, sb.wait_closed, 10.0)
            self.assertTrue(closed, "the cancel did not reach the producer")
            self.assertEqual(producer.send_many([(sa, b"a1"), (sb, b"b1")], flush=True), [(1, "closed")])
            self.assertEqual(await a.recv(), ("data", sa.session, b"a1"))
            # The same step as a list of senders and a list of records, side by side.
            self.assertEqual(producer.send_many([sb, sa, sa], [b"b2", b"a2", b"a3"], flush=True), [(0, "closed")])
            self.assertEqual(await anext(a), b"a2")
            self.assertEqual(await anext(a), b"a3")
            del sa, sb  # the producer's senders go without finish(): the stream ends dropped
            with self.assertRaises(ringfire.aio.StreamDropped) as e:
                await asyncio.wait_for(anext(a), 10)
            self.assertEqual(e.exception.reason, "producer_gone")

        asyncio.run(main())
        with self.assertRaises(ValueError):
            producer.send_many([("not", "a sender pair", 3)])
        with self.assertRaises(ValueError):
            producer.send_many([(None, "text, not bytes")])
        with self.assertRaises(ValueError):
            producer.send_many([None, None], [b"two senders, one record"])
        with self.assertRaises(ValueError):
            producer.send_many([None], ["text, not bytes"])

    def test_a_handle_no_producer_opens_ends_never_opened(self):
        # A frontend's request whose engine took the handle and died before
        # its first token: its ticket lapses, and the reader hears why.
        consumer = node("c", accept_timeout=0.5)

        async def main():
            anode = ringfire.aio.AsyncNode(consumer)
            a = anode.create_anchor()
            with self.assertRaises(ringfire.aio.StreamDropped) as e:
                await asyncio.wait_for(anext(a), 30)
            self.assertEqual(e.exception.reason, "never_opened")
            anode.close()

        asyncio.run(main())
        self.assertEqual(consumer.stats()["tickets_expired"], 1)
        with self.assertRaises(ValueError):
            node("c2", accept_timeout=0)

    def test_an_engine_lost_mid_stream_is_resumed_from_another_and_the_reader_sees_one_stream(self):
        # The engine's node goes (its host lost) after three tokens; another
        # engine resumes the stream by its session: the reader's `async for`
        # gets all six in order, and no StreamDropped.
        consumer = node("c", resume_window=10.0)
        engines = [node("p1", flush="manual")]

        async def main():
            anode = ringfire.aio.AsyncNode(consumer)
            a = anode.create_anchor()
            loop = asyncio.get_running_loop()
            s = await loop.run_in_executor(None, engines[0].attach, a.handle, consumer.control_address)
            self.assertEqual(s.resume_at, 0)
            self.assertIsNone(engines[0].send_many([s, s, s], [b"t0", b"t1", b"t2"], flush=True))
            got = [await asyncio.wait_for(anext(a), 10) for _ in range(3)]
            session = s.session
            engines.clear()  # the engine's node is gone (its last reference): its channel ends
            deadline = loop.time() + 10
            while consumer.stats()["resumes_held"] < 1 and loop.time() < deadline:
                await asyncio.sleep(0.01)
            second = node("p2", flush="manual")
            r = await loop.run_in_executor(None, lambda: second.attach(a.handle, consumer.control_address, resume=session))
            self.assertEqual(r.resume_at, 3)  # the next frame is t3
            self.assertIsNone(second.send_many([r, r, r], [b"t3", b"t4", b"t5"], flush=True))
            r.finish()
            second.flush_batch()
            async for token in a:
                got.append(token)
            self.assertEqual(got, [b"t%d" % k for k in range(6)])
            self.assertEqual(consumer.stats()["resumes_answered"], 1)

        asyncio.run(main())

    def test_a_reader_cancelled_while_waiting_loses_no_token(self):
        # A reader cancelled while it waits (its client went) must leave
        # the items that come after for the next one, in order.
        consumer, producer = node("c"), node("p", flush="manual")

        async def main():
            anode, a, s, waiting = await one_waiting_reader(consumer, producer)
            loop = asyncio.get_running_loop()
            waiting.cancel()
            self.assertIsNone(producer.send_many([(s, b"t0"), (s, b"t1")], flush=True))
            deadline = loop.time() + 10
            while a.ready() < 2 and loop.time() < deadline:  # taken from the node while no reader waits
                await asyncio.sleep(0.01)
            self.assertEqual(a.ready(), 2)
            got = [await asyncio.wait_for(anext(a), 10), await asyncio.wait_for(anext(a), 10)]
            self.assertEqual(got, [b"t0", b"t1"])
            self.assertTrue(s.finish())
            producer.flush_batch()
            rest = [t async for t in a]  # ends at the finish, with nothing more
            self.assertEqual(rest, [])
            return waiting

        waiting = asyncio.run(main())
        self.assertTrue(waiting.cancelled())

    def test_a_reader_cancelled_just_as_its_item_arrives_loses_no_token(self):
        # The node's reader runs, then, in the same turn of the loop, the
        # waiting reader is cancelled (its client went, a wait_for timed
        # out): the item it was woken for stays for the next reader.
        consumer, producer = node("c"), node("p", flush="manual")

        async def main():
            anode, a, s, waiting = await one_waiting_reader(consumer, producer)
            self.assertIsNone(producer.send_many([(s, b"t0"), (s, b"t1")], flush=True))
            self.assertTrue(readable(consumer.fd(), 10))  # blocking: the loop does not turn meanwhile
            anode._on_ready()  # the loop's reader callback, as the loop runs it ...
            waiting.cancel()   # ... and the reader cancelled in the same turn
            with self.assertRaises(asyncio.CancelledError):
                await waiting
            got = [await asyncio.wait_for(anext(a), 10), await asyncio.wait_for(anext(a), 10)]
            self.assertEqual(got, [b"t0", b"t1"])

        asyncio.run(main())

    def test_misuse_is_refused_or_counted_never_silent(self):
        # A second reader task on one anchor, a second AsyncNode on one
        # node, an anchor made on the node beside its AsyncNode: a task
        # hung for ever, an AsyncNode went deaf, items vanished (review
        # helper-36). Refused, refused, counted.
        consumer, producer = node("c"), node("p", flush="manual")

        async def main():
            anode, a, s, waiting = await one_waiting_reader(consumer, producer)
            with self.assertRaisesRegex(RuntimeError, "another task is already waiting on this anchor"):
                await a.recv()
            with self.assertRaisesRegex(RuntimeError, "read by an AsyncNode already"):
                ringfire.aio.AsyncNode(consumer)
            plain = consumer.create_anchor()  # the node's own, beside the AsyncNode
            loop = asyncio.get_running_loop()
            ps = await loop.run_in_executor(None, producer.attach, plain.handle, consumer.control_address)
            self.assertIsNone(producer.send_many([(s, b"t0"), (ps, b"lost")], flush=True))
            self.assertEqual(await asyncio.wait_for(waiting, 10), b"t0")
            deadline = loop.time() + 10
            while anode.unclaimed < 1 and loop.time() < deadline:
                await asyncio.sleep(0.01)
            self.assertEqual(anode.unclaimed, 1)
            anode.close()
            again = ringfire.aio.AsyncNode(consumer)  # once closed, another may read the node
            again.close()

        asyncio.run(main())

        async def another_run():  # a new loop's AsyncNode, the last one never closed: its loop is
            ringfire.aio.AsyncNode(consumer)

        asyncio.run(another_run())
        asyncio.run(another_run())  # refused before (review helper-37)
        import gc
        import weakref
        gone = weakref.ref(consumer)
        del consumer
        gc.collect()
        self.assertIsNone(gone())  # no AsyncNode entry keeps the node alive


if __name__ == "__main__":
    unittest.main()
