"""ringfire.engine_sim — a decode loop that streams tokens over the mux: the
producer side of ringfire.frontend, shaped like an inference engine.

Requests arrive on a small HTTP endpoint (POST /generate with the
frontend's anchor handle, its node's address and max_tokens); the engine
attaches a sender and adds the request to its running batch. Every step
(--rate steps per second) it makes one token for every running request and
sends the whole step in one node.send_many(..., flush=True). A request
whose consumer went away (its HTTP client disconnected) answers 'closed'
on the step after: its decode slot is freed there, and the step is
counted. GET /stats says what it did.

  python3 -m ringfire.engine_sim --control 198.18.0.2:7600 --http 198.18.0.2:8100 [--rate 50] [--no-mux]

A token is `{"text": "...", "i": K, "t": SEND_NS}` (JSON, UTF-8): its text,
its index in the stream, and when the engine sent it (CLOCK_MONOTONIC, ns).
"""
import argparse
import asyncio
import json
import os
import sys
import time

from aiohttp import web

import ringfire

WORDS = ("the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "and", "runs", "far")


def token(i, request_id):
    return json.dumps({"text": WORDS[(i + request_id) % len(WORDS)] + " ", "i": i, "t": time.monotonic_ns()},
                      separators=(",", ":")).encode()


class Request:
    __slots__ = ("id", "sender", "max_tokens", "next", "started_step")

    def __init__(self, rid, sender, max_tokens, step):
        self.id, self.sender, self.max_tokens, self.next, self.started_step = rid, sender, max_tokens, 0, step


class Engine:
    def __init__(self, args):
        self.node = ringfire.Node(instance_id=f"engine-{os.getpid()}-{args.control}", control=args.control,
                                  mux=not args.no_mux, flush="manual", initial_credit=args.credit,
                                  psk_file=args.psk_file or "")
        self.rate = args.rate
        self.running = []
        self.step = 0
        self.next_id = 0
        # For each cancelled request (the first 10,000): how many tokens the
        # engine had made when it learnt of the cancel (cancelled_at), and
        # when it learnt it (cancelled_ns, CLOCK_MONOTONIC, by request id).
        self.stats = {"requests": 0, "finished": 0, "cancelled": 0, "refused": 0, "tokens": 0, "cancelled_at": [],
                      "cancelled_ns": {}}

    async def generate(self, request):
        try:
            body = await request.json()
            handle, peer, max_tokens = str(body["handle"]), str(body["peer"]), int(body.get("max_tokens", 16))
        except (ValueError, KeyError, TypeError) as e:
            return web.json_response({"error": f"bad request: {e}"}, status=400)
        if not 1 <= max_tokens <= 100_000:
            return web.json_response({"error": "max_tokens must be between 1 and 100000"}, status=400)
        loop = asyncio.get_running_loop()
        try:
            # attach waits for the consumer's answer (setup, not the decode path): off the loop.
            sender = await loop.run_in_executor(None, self.node.attach, handle, peer)
        except (ConnectionError, ValueError) as e:
            self.stats["refused"] += 1
            return web.json_response({"error": str(e)}, status=502)
        self.next_id += 1
        self.running.append(Request(self.next_id, sender, max_tokens, self.step))
        self.stats["requests"] += 1
        return web.json_response({"id": self.next_id, "path": "per-stream" if sender.per_stream else "mux"})

    async def get_stats(self, request):
        s = dict(self.stats)
        s["running"] = len(self.running)
        s["steps"] = self.step
        s["node"] = self.node.stats()
        return web.json_response(s)

    async def decode_loop(self):
        start = time.monotonic()
        while True:
            self.step += 1
            due = start + self.step / self.rate
            delay = due - time.monotonic()
            await asyncio.sleep(max(0.0, delay))
            if not self.running:
                continue
            batch = self.running
            step = [(r.sender, token(r.next, r.id)) for r in batch]
            not_sent = self.node.send_many(step, flush=True)
            gone, held = set(), set()
            for idx, status in not_sent or ():
                if status == "closed":  # its consumer cancelled: the decode slot is free from this step
                    gone.add(idx)
                    self.stats["cancelled"] += 1
                    if len(self.stats["cancelled_at"]) < 10_000:
                        self.stats["cancelled_at"].append(batch[idx].next)
                        self.stats["cancelled_ns"][batch[idx].id] = time.monotonic_ns()
                else:
                    held.add(idx)  # 'full': no credit (its client reads slowly): the token is made again next step
            keep = []
            for idx, r in enumerate(batch):
                if idx in gone:
                    continue
                if idx in held:
                    keep.append(r)
                    continue
                r.next += 1
                self.stats["tokens"] += 1
                if r.next == r.max_tokens:
                    r.sender.finish()
                    self.stats["finished"] += 1
                else:
                    keep.append(r)
            self.running = keep
            if len(keep) != len(batch):
                self.node.flush_batch()  # the terminals go with this step


def main(argv=None):
    p = argparse.ArgumentParser(prog="python3 -m ringfire.engine_sim", description=__doc__.split("\n")[0])
    p.add_argument("--control", required=True, help="this engine's mux node, IP:PORT (port 0 picks one)")
    p.add_argument("--http", required=True, help="where it takes requests, IP:PORT")
    p.add_argument("--rate", type=float, default=50.0, help="decode steps per second (default 50)")
    p.add_argument("--credit", type=int, default=256)
    p.add_argument("--no-mux", action="store_true", help="every stream on its own TCP connection (the per-stream path)")
    p.add_argument("--psk-file", help="a pre-shared key file: channels authenticated both ways")
    args = p.parse_args(argv)
    if not 0 < args.rate <= 100_000:  # nan and inf too (inf decoded flat out on a core, helper-46)
        p.error(f"--rate {args.rate}: give above 0, at most 100000 steps/s")
    if not 1 <= args.credit <= 65535:
        p.error(f"--credit {args.credit}: give 1 to 65535 frames")
    host, _, port = args.http.rpartition(":")
    if not host or not port.isdigit() or int(port) > 65535:
        p.error(f"--http {args.http}: give IP:PORT")

    async def run():
        engine = Engine(args)
        app = web.Application()
        app.router.add_post("/generate", engine.generate)
        app.router.add_get("/stats", engine.get_stats)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, host, int(port)).start()
        print(f"engine_sim: decoding at {args.rate:g} steps/s; requests at http://{args.http}/generate; "
              f"node {engine.node.control_address} ({'per-stream' if args.no_mux else 'mux'})", flush=True)
        try:
            await engine.decode_loop()
        finally:
            await runner.cleanup()
            engine.node.close()  # its rings go, its consumers see the streams end

    try:
        asyncio.run(run())
    except KeyboardInterrupt:
        pass
    except (ValueError, RuntimeError, OSError) as e:  # a key file, an address in use: said, not a traceback
        print(f"engine_sim: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
