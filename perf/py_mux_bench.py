"""py_mux_bench.py — token streaming from Python, two ways, the same shape:
an engine (producer) emitting one 16-byte token per stream per decode step
and a frontend (consumer, asyncio) with one coroutine per request reading
its stream in order. Run by perf/py_mux_bench.sh on two lab hosts.

  zmq  what inference servers use today: one PUSH/PULL socket, one msgpack
       message per decode step holding every stream's token; the frontend
       demultiplexes into per-request asyncio queues.
  mux  ringfire's Python API: one anchor per request (ringfire.aio), the
       producer's step in one send_many(senders, tokens, flush=True): the
       decode batch's senders in a list, a list of its tokens each step.

Every token is checked (stream, index, order); the end is checked (T
tokens, then one end per stream). The report is one JSON line: CPU per
token (time.process_time: every thread of this process), per-token latency
percentiles (the token carries its send time; both hosts share the
clock), peak RSS.

  consumer: --role consumer --path zmq|mux --listen IP:PORT --streams N --tokens T --handles FILE
  producer: --role producer --path zmq|mux --peer IP:PORT[,IP:PORT...] --tokens T --rate STEPS --handles FILE[,FILE...]
A producer given Y peers (and Y handle files) is one engine feeding Y
frontends: zmq, a PUSH socket to each (a message per frontend a step);
mux, one node attached to each frontend's anchors (a channel per peer).
It reports the TCP connections and UDP sockets its host holds at the end.
--dpdk-eal ARGS --dpdk-ip A.B.C.D (mux): the node's channels on DPDK
(ethdev 0, e.g. a net_memif vdev), its control still on the kernel.
Options: --stall K (consumer: K requests stop reading after their first
token: a client that stopped; they are not checked for completion, and
the report gives the others' latency and this process's peak memory),
--cancel K (consumer: K requests cancel after 10 tokens; the producer
reports the step at which it stopped producing for each).
"""
import argparse
import asyncio
import json
import os
import resource
import struct
import sys
import time

TOKEN = struct.Struct("<IIQ")  # stream, index, send time (ns): 16 bytes


def cpu_s():
    """this process's CPU, every thread's (CLOCK_PROCESS_CPUTIME_ID: ns, not os.times()'s 10 ms ticks)."""
    return time.process_time()


def threads_ns():
    """each thread's CPU so far (ns) and times it ran (/proc schedstat),
    summed by thread name (python3, the node's rf-node and rf-worker,
    ZeroMQ's ZMQbg/IO/0, ...)."""
    out = {}
    for t in os.listdir("/proc/self/task"):
        try:
            name = open(f"/proc/self/task/{t}/comm").read().strip()
            ns, _, runs = (int(v) for v in open(f"/proc/self/task/{t}/schedstat").read().split())
        except OSError:
            continue  # the thread ended meanwhile
        was = out.get(name, (0, 0))
        out[name] = (was[0] + ns, was[1] + runs)
    return out


def by_thread(before, tokens, steps):
    """by thread name since a threads_ns() snapshot: [CPU ns per token, times it ran per step]."""
    out = {}
    for k, (ns, runs) in threads_ns().items():
        ns0, runs0 = before.get(k, (0, 0))
        if ns > ns0:
            out[k] = [round((ns - ns0) / max(1, tokens)), round((runs - runs0) / max(1, steps), 1)]
    return out


def pct(xs, q):
    if not xs:
        return 0.0
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] / 1000.0


def report(d):
    print(json.dumps(d), flush=True)


# ---- the consumer (frontend) ----------------------------------------------


class Tally:
    """what every request checks and what the report says."""

    def __init__(self, n, tokens, stall, cancel):
        self.n, self.tokens = n, tokens
        self.stall = set(range(stall))                 # the first `stall` requests stop reading
        self.cancel = set(range(stall, stall + cancel))  # the next `cancel` ones cancel after 10 tokens
        self.lat = []
        self.items = 0
        self.bad = 0
        self.finished = 0
        self.dropped = 0
        self.cancelled = 0
        self.first = None
        self.last = None
        self.threads = {}  # CPU ns per token by thread name

    def ended(self, got):
        """a stream's end after `got` tokens: finished whole, or short."""
        if got == self.tokens:
            self.finished += 1
        else:
            self.bad += 1

    def token(self, i, want, data):
        s, k, sent = TOKEN.unpack(data)
        now = time.monotonic_ns()
        if s != i or k != want:
            self.bad += 1
        self.items += 1
        self.lat.append(now - sent)
        if self.first is None:
            self.first = now
        self.last = now
        return k + 1


async def run_requests(args, tally, coros):
    """runs one coroutine per request until every checked one is done; the
    CPU it took (the stalled requests are then cancelled)."""
    cpu0, threads0 = cpu_s(), threads_ns()
    tasks = [asyncio.create_task(c) for c in coros]
    checked = [t for i, t in enumerate(tasks) if i not in tally.stall]
    await asyncio.wait_for(asyncio.gather(*checked), args.timeout)
    cpu = cpu_s() - cpu0
    tally.threads = by_thread(threads0, tally.items, tally.tokens)
    for t in tasks:
        t.cancel()
    return cpu


async def consume_mux(args, tally):
    import ringfire
    import ringfire.aio

    node = ringfire.Node(instance_id=f"front-{os.getpid()}", control=args.listen, initial_credit=args.credit,
                         mtu=args.mtu, gso=not args.no_udp_runs, gro=not args.no_udp_runs, **dpdk_kwargs(args))
    anode = ringfire.aio.AsyncNode(node)
    anchors = [anode.create_anchor() for _ in range(args.streams)]
    with open(args.handles + ".tmp", "w") as f:
        f.write("\n".join(a.handle for a in anchors) + "\n")
    os.rename(args.handles + ".tmp", args.handles)

    async def request(i, a):
        want = 0
        if i in tally.stall:  # a client that stopped reading after its first token
            _, _, data = await a.recv()
            tally.token(i, 0, data)
            await asyncio.sleep(3600)
        try:
            async for data in a:
                want = tally.token(i, want, data)
                if i in tally.cancel and want == 10:
                    a.cancel()
                    tally.cancelled += 1
                    return
        except ringfire.aio.StreamDropped:
            tally.dropped += 1
            return
        tally.ended(want)

    cpu = await run_requests(args, tally, [request(i, a) for i, a in enumerate(anchors)])
    st = node.stats()
    # What the stalled requests' streams hold in this process (the rest waits
    # at the producer, held back by credit).
    held = sum(anchors[i].ready() for i in tally.stall)
    return cpu, {"batches": st["batches_received"], "polls": st["polls"], "over_budget": st["over_budget"],
                 "stalled_held": held}


async def consume_zmq(args, tally):
    import msgpack
    import zmq
    import zmq.asyncio

    ctx = zmq.asyncio.Context()
    sock = ctx.socket(zmq.PULL)
    sock.setsockopt(zmq.RCVHWM, args.hwm)
    sock.bind(f"tcp://{args.listen}")
    queues = [asyncio.Queue() for _ in range(args.streams)]
    with open(args.handles + ".tmp", "w") as f:
        f.write("\n".join(str(i) for i in range(args.streams)) + "\n")
    os.rename(args.handles + ".tmp", args.handles)
    cancelled = set()

    async def pump():  # the frontend's output handler: one message per step, demultiplexed
        while True:
            step = msgpack.unpackb(await sock.recv(), use_list=False)
            for i, data in step:
                if i not in cancelled:
                    queues[i].put_nowait(data)

    async def request(i, q):
        want = 0
        if i in tally.stall:
            tally.token(i, 0, await q.get())
            await asyncio.sleep(3600)
        while True:
            data = await q.get()
            if data is None:
                break
            want = tally.token(i, want, data)
            if i in tally.cancel and want == 10:
                cancelled.add(i)  # the engine is told on its own channel (not measured here)
                tally.cancelled += 1
                return
        tally.ended(want)

    p = asyncio.create_task(pump())
    cpu = await run_requests(args, tally, [request(i, q) for i, q in enumerate(queues)])
    queued = sum(queues[i].qsize() for i in tally.stall)  # the stalled requests' queues: nothing holds them back
    p.cancel()
    sock.close(0)
    return cpu, {"stalled_held": queued}


def consumer(args):
    tally = Tally(args.streams, args.tokens, args.stall, args.cancel)
    run = consume_mux if args.path == "mux" else consume_zmq
    if args.loop == "uvloop":  # the event loop most Python inference frontends run on (uvicorn's default)
        import uvloop
        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    cpu, extra = asyncio.run(run(args, tally))
    checked = args.streams - len(tally.stall)
    ok = tally.bad == 0 and tally.finished + tally.cancelled == checked
    report({"role": "consumer", "path": args.path, "streams": args.streams, "tokens": tally.items,
            "finished": tally.finished, "cancelled": tally.cancelled, "dropped": tally.dropped, "bad": tally.bad,
            "ok": ok, "cpu_ns_per_token": cpu * 1e9 / max(1, tally.items),
            "tokens_per_s": tally.items / max(1e-9, (tally.last - tally.first) / 1e9) if tally.first else 0,
            "latency_us": {"p50": pct(tally.lat, 0.5), "p99": pct(tally.lat, 0.99), "p999": pct(tally.lat, 0.999)},
            "peak_rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, "threads": tally.threads, **extra})
    return 0 if ok else 3


# ---- the producer (engine) -------------------------------------------------


def pace(start, step, rate):
    if rate:
        due = start + step / rate
        delay = due - time.monotonic()
        if delay > 0:
            time.sleep(delay)


def dpdk_kwargs(args):
    """the node's channels on DPDK's ethdev 0 (the EAL started here, once), or nothing."""
    if not args.dpdk_eal:
        return {}
    import ringfire
    ringfire.start_dpdk(args.dpdk_eal)
    return {"dpdk_port": 0, "dpdk_ip": args.dpdk_ip}


def host_sockets():
    """the TCP connections established and the UDP sockets open in this
    process's network namespace (the lab host: this process alone)."""
    def rows(f):
        try:
            return [l.split() for l in open(f).read().splitlines()[1:]]
        except OSError:
            return []
    return {"tcp": sum(1 for r in rows("/proc/net/tcp") if r[3] == "01"), "udp": len(rows("/proc/net/udp"))}


def produce_mux(args, frontends):
    import ringfire

    node = ringfire.Node(instance_id=f"engine-{os.getpid()}", control=args.listen, flush="manual", mtu=args.mtu,
                         initial_credit=args.credit, gso=not args.no_udp_runs, gro=not args.no_udp_runs,
                         **dpdk_kwargs(args))
    senders, ids = [], []
    for peer, handles in frontends:
        senders += node.attach_many(handles, peer)  # a frontend's requests at once
        ids += range(len(handles))  # a stream's id is its place at its own frontend
    # The clock starts once the channels' rings are warm (RingFile::warm,
    # ~12 ms a 12 MiB ring here, once): a server runs for hours, and their
    # first lap is not a decode step's cost.
    deadline = time.monotonic() + 10
    while node.stats()["rings_warmed"] < len(frontends) and time.monotonic() < deadline:
        time.sleep(0.01)
    rings_warm = node.stats()["rings_warmed"] >= len(frontends)  # reported: false if the clock started without
    n = len(senders)
    live = list(range(n))
    batch = list(senders)  # the decode batch: live's senders, in its order (a token each a step)
    stopped_at = {}
    full = 0
    cpu0, threads0, start = cpu_s(), threads_ns(), time.monotonic()
    for k in range(args.tokens):
        pace(start, k, args.rate)
        now = time.monotonic_ns()
        step = [TOKEN.pack(ids[i], k, now) for i in live]
        not_sent = node.send_many(batch, step, flush=True)
        if not_sent:
            gone = set()
            for idx, status in not_sent:
                i = live[idx]
                if status == "closed":
                    stopped_at[i] = k  # the consumer cancelled: this decode slot is free from this step
                    gone.add(i)
                elif status == "full":  # no credit: wait for it, in order (the stalled client's stream)
                    full += 1
                    gone.add(i)  # a stalled stream is left behind (its client stopped)
            live = [i for i in live if i not in gone]
            batch = [senders[i] for i in live]
    sockets = host_sockets()  # every stream still open
    for i in live:
        senders[i].finish()
    node.flush_batch()
    cpu = cpu_s() - cpu0
    threads = by_thread(threads0, len(senders) * args.tokens, args.tokens)
    node.drain(10.0)
    st = node.stats()
    return cpu, st["records_sent"], {"stopped_at": sorted(stopped_at.values()), "full": full, "threads": threads,
                                     "rings_warm": rings_warm, **sockets}


def produce_zmq(args, frontends):
    import msgpack
    import zmq

    ctx = zmq.Context()
    outs = []  # (socket, the frontend's stream ids): a PUSH socket to each frontend
    for peer, handles in frontends:
        sock = ctx.socket(zmq.PUSH)
        sock.setsockopt(zmq.SNDHWM, args.hwm)
        sock.connect(f"tcp://{peer}")
        outs.append((sock, [int(h) for h in handles]))
    cpu0, threads0, start = cpu_s(), threads_ns(), time.monotonic()
    sent = 0
    for k in range(args.tokens):
        pace(start, k, args.rate)
        now = time.monotonic_ns()
        for sock, ids in outs:
            sock.send(msgpack.packb([(i, TOKEN.pack(i, k, now)) for i in ids]))
            sent += len(ids)
    sockets = host_sockets()  # every stream still open
    for sock, ids in outs:
        sock.send(msgpack.packb([(i, None) for i in ids]))
    cpu = cpu_s() - cpu0
    threads = by_thread(threads0, sent, args.tokens)
    for sock, _ in outs:
        sock.close(linger=10_000)
    ctx.term()
    return cpu, sent, {"threads": threads, **sockets}


def producer(args):
    peers, files = args.peer.split(","), args.handles.split(",")
    if len(peers) != len(files):
        sys.exit("py_mux_bench: --peer and --handles must name as many frontends")
    frontends = []
    for peer, f in zip(peers, files):
        deadline = time.monotonic() + 30
        while not os.path.exists(f) and time.monotonic() < deadline:
            time.sleep(0.05)
        frontends.append((peer, [l.strip() for l in open(f) if l.strip()]))
    run = produce_mux if args.path == "mux" else produce_zmq
    cpu, sent, extra = run(args, frontends)
    report({"role": "producer", "path": args.path, "streams": sum(len(h) for _, h in frontends),
            "frontends": len(frontends), "records": sent,
            "cpu_ns_per_token": cpu * 1e9 / max(1, sent),
            "peak_rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, **extra})
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--role", choices=["consumer", "producer"], required=True)
    p.add_argument("--path", choices=["zmq", "mux"], required=True)
    p.add_argument("--listen", help="consumer: where it listens; producer (mux): its node's control address")
    p.add_argument("--peer", help="producer: the consumers' addresses, IP:PORT[,IP:PORT...] (one per frontend)")
    p.add_argument("--streams", type=int, default=300)
    p.add_argument("--tokens", type=int, default=200)
    p.add_argument("--rate", type=float, default=50.0, help="decode steps per second (0: flat out)")
    p.add_argument("--credit", type=int, default=256)
    p.add_argument("--hwm", type=int, default=1000, help="zmq: the sockets' high-water mark (messages)")
    p.add_argument("--mtu", type=int, default=1472, help="mux: the channels' largest datagram (8972 on a 9000-byte link)")
    p.add_argument("--loop", choices=["asyncio", "uvloop"], default="asyncio",
                   help="consumer: the event loop (uvloop: Debian's python3-uvloop)")
    p.add_argument("--no-udp-runs", action="store_true",
                   help="mux: one send and one receive per datagram (no UDP GSO/GRO), as before 2026-12-03")
    p.add_argument("--handles", required=True, help="consumer: where it writes its handles; producer: FILE[,FILE...]")
    p.add_argument("--dpdk-eal", default="", help="mux: start DPDK's EAL with these arguments; the channels on ethdev 0")
    p.add_argument("--dpdk-ip", default="", help="mux with --dpdk-eal: the DPDK port's address")
    p.add_argument("--stall", type=int, default=0)
    p.add_argument("--cancel", type=int, default=0)
    p.add_argument("--timeout", type=float, default=120.0)
    args = p.parse_args()
    if args.streams < 1 or args.tokens < 1 or args.rate < 0:
        p.error("--streams and --tokens must be at least 1, --rate at least 0")
    return consumer(args) if args.role == "consumer" else producer(args)


if __name__ == "__main__":
    sys.exit(main())
