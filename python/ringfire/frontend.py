"""ringfire.frontend — an OpenAI-style streaming completions server fed by
the mux: POST /v1/completions with {"prompt": ..., "max_tokens": N,
"stream": true} answers Server-Sent Events, one per token, then
`data: [DONE]`. Each request makes an anchor (ringfire.aio), hands its
handle to the engine (ringfire.engine_sim's POST /generate), and relays
every token the anchor delivers. A client that disconnects cancels its
stream: the engine's next send answers 'closed' and its decode slot is
free. A client that stops reading holds back its own stream only (its
anchor pauses, its credit stops), never the others.

  python3 -m ringfire.frontend --control 198.18.0.1:7600 --http 198.18.0.1:8000 --engine http://198.18.0.2:8100

Without "stream": true the answer is one JSON object with the whole text.
GET /stats: the frontend's counters and its node's (?cancel_ns=1: with each
disconnected request's cancel time).

Bounded against clients (review helper-32): at most --max-requests in
flight (503 past it), a bounded pool of engine connections, a request
whose client left stops (streamed or not), and a client that reads
nothing for --write-timeout seconds with its socket's buffer (64 KiB)
full is cut, its decode slot freed. A connection that has sent no whole
request head within --header-timeout seconds is closed (aiohttp 3.8 has
no such deadline), and past --max-connections the newest such are.
"""
import argparse
import asyncio
import json
import os
import resource
import signal
import socket
import sys
import time

import aiohttp
from aiohttp import web

import ringfire
import ringfire.aio


class Frontend:
    def __init__(self, args):
        self.node = ringfire.Node(instance_id=f"frontend-{os.getpid()}-{args.control}", control=args.control,
                                  mux=not args.no_mux, initial_credit=args.credit, psk_file=args.psk_file or "",
                                  accept_timeout=args.accept_timeout)
        self.engine = args.engine.rstrip("/")
        self.buffer = args.buffer
        self.max_requests = args.max_requests
        self.write_timeout = args.write_timeout
        self.header_timeout = args.header_timeout
        self.in_flight = 0
        self.anode = None
        self.session = None
        # cancel_ns: when each disconnected request's stream was cancelled
        # (the first 10,000, by the engine's request id): with the engine's
        # cancelled_ns, how long a cancel takes to free its decode slot.
        self.stats = {"requests": 0, "completed": 0, "disconnected": 0, "dropped": 0, "engine_errors": 0, "tokens": 0,
                      "busy": 0, "cut_slow": 0, "cancel_ns": {}}

    async def start(self, app):
        self.anode = ringfire.aio.AsyncNode(self.node, buffer=self.buffer)
        # Bounded: one connection a request in flight was a descriptor each on
        # both sides, 15,000 of them in a burst of requests closed at once.
        self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=256))

    async def stop(self, app):
        await self.session.close()
        self.anode.close()
        self.node.close()  # its rings go now, its producers see their streams closed

    async def completions(self, request):
        if self.in_flight >= self.max_requests:
            self.stats["busy"] += 1
            return web.json_response({"error": {"message": "busy: too many requests in flight, retry"}}, status=503)
        try:  # the body within the header timeout too (aiohttp 3.8 waits for it without end)
            async with asyncio.timeout(self.header_timeout):
                body = await request.json()
        except TimeoutError:
            return web.json_response({"error": {"message": "the request body did not arrive in time"}}, status=408)
        except (ValueError, TypeError, RecursionError) as e:
            return web.json_response({"error": {"message": f"bad request: {e}"}}, status=400)
        self.in_flight += 1
        try:
            return await self.complete(request, body)
        finally:
            self.in_flight -= 1

    async def complete(self, request, body):
        try:
            max_tokens = int(body.get("max_tokens", 16))
            stream = body.get("stream", False)
            if not isinstance(stream, bool):
                raise TypeError("stream must be true or false")
        except (ValueError, TypeError, AttributeError, OverflowError, RecursionError) as e:
            return web.json_response({"error": {"message": f"bad request: {e}"}}, status=400)
        if not 1 <= max_tokens <= 100_000:
            return web.json_response({"error": {"message": "max_tokens must be between 1 and 100000"}}, status=400)
        self.stats["requests"] += 1
        anchor = self.anode.create_anchor()
        rid = None
        try:
            try:
                async with self.session.post(f"{self.engine}/generate",
                                             json={"handle": anchor.handle, "peer": self.node.control_address,
                                                   "max_tokens": max_tokens}) as r:
                    answer = await r.json()
                    if r.status != 200:
                        raise RuntimeError(answer.get("error", r.status))
            except (aiohttp.ClientError, RuntimeError, ValueError) as e:
                self.stats["engine_errors"] += 1
                return web.json_response({"error": {"message": f"the engine refused: {e}"}}, status=502)
            rid = answer.get("id")
            if not stream:
                text = []
                try:
                    async for tok in anchor:
                        if request.transport is None or request.transport.is_closing():
                            self.stats["disconnected"] += 1  # it left: the finally below cancels the stream
                            return web.Response(status=499)
                        text.append(json.loads(tok)["text"])
                except ringfire.aio.StreamDropped as e:
                    self.stats["dropped"] += 1
                    return web.json_response({"error": {"message": f"stream dropped: {e.reason}"}}, status=502)
                self.stats["completed"] += 1
                self.stats["tokens"] += len(text)
                return web.json_response({"id": f"cmpl-{rid}", "object": "text_completion",
                                          "choices": [{"index": 0, "text": "".join(text), "finish_reason": "length"}]})
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
            head = ('data: {"id":"cmpl-' + str(rid) + '","object":"text_completion","choices":[{"index":0,').encode()
            transport = None

            async def send(data=None):
                # Every write (and the end) at most write_timeout: a client that
                # reads nothing holds its decode slot no longer than that.
                async with asyncio.timeout(self.write_timeout):
                    await (resp.write(data) if data is not None else resp.write_eof())

            try:
                await resp.prepare(request)
                transport = request.transport
                # A client that stops reading holds its stream back within 64 KiB
                # (its anchor pauses), not the kernel's autotuned MiBs.
                sock = transport.get_extra_info("socket") if transport is not None else None
                if sock is not None:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 << 10)
                try:
                    async for tok in anchor:
                        # The engine's token is a JSON object ({"text": ..., "i": ..., "t": ...}): its
                        # fields become the choice's (OpenAI's "text" among them), with no re-encoding.
                        await send(head + tok[1:] + b"]}\n\n")
                        self.stats["tokens"] += 1
                    await send(b"data: [DONE]\n\n")
                    self.stats["completed"] += 1
                except ringfire.aio.StreamDropped as e:
                    self.stats["dropped"] += 1
                    await send(f'data: {{"error":{{"message":"stream dropped: {e.reason}"}}}}\n\n'.encode())
                await send()
            except TimeoutError:
                self.stats["cut_slow"] += 1
                if transport is not None:
                    transport.abort()  # close() would keep the socket until its buffer drained: never
            except (ConnectionResetError, aiohttp.ClientConnectionError):
                self.stats["disconnected"] += 1  # the client went away: the finally below cancels the stream
            return resp
        except asyncio.CancelledError:
            self.stats["disconnected"] += 1  # the server stops (aiohttp 3.8 does not cancel on a client's leaving)
            raise
        finally:
            if anchor.anchor.live_streams and rid is not None and len(self.stats["cancel_ns"]) < 10_000:
                self.stats["cancel_ns"][rid] = time.monotonic_ns()
            anchor.close()  # a live stream is cancelled: its producer learns it on its next send

    async def get_stats(self, request):
        stats = dict(self.stats)
        if request.query.get("cancel_ns") != "1":
            del stats["cancel_ns"]  # up to 10,000 entries: only when asked
        return web.json_response({**stats, "in_flight": self.in_flight, "node": self.node.stats()})


async def sweep_idle(server, header_timeout, max_connections):
    """Close connections that sent no whole request head in time, and the
    newest of those past max_connections (slowloris: review helper-32).
    `_request_count` is aiohttp's count of a connection's request heads
    (RequestHandler, 3.8); without it nothing is closed."""
    first_seen = {}
    while True:
        await asyncio.sleep(1)
        now = time.monotonic()
        conns = server.connections
        live = set(conns)
        for h in list(first_seen):
            if h not in live:
                del first_seen[h]
        silent = []
        for h in conns:
            seen = first_seen.setdefault(h, now)
            if getattr(h, "_request_count", 1) == 0:
                silent.append((seen, h))
        silent.sort(key=lambda x: x[0])
        excess = max(0, len(conns) - max_connections)
        for i, (seen, h) in enumerate(silent):
            if now - seen >= header_timeout or i >= len(silent) - excess:
                h.force_close()


def make_app(args):
    fe = Frontend(args)
    app = web.Application()
    app.router.add_post("/v1/completions", fe.completions)
    app.router.add_get("/stats", fe.get_stats)
    app.on_startup.append(fe.start)
    app.on_cleanup.append(fe.stop)
    return app, fe


def main(argv=None):
    p = argparse.ArgumentParser(prog="python3 -m ringfire.frontend", description=__doc__.split("\n")[0])
    p.add_argument("--control", required=True, help="this frontend's mux node, IP:PORT (the engine reaches it)")
    p.add_argument("--http", required=True, help="where clients connect, IP:PORT")
    p.add_argument("--engine", required=True, help="the engine's request endpoint, http://IP:PORT")
    p.add_argument("--credit", type=int, default=256, help="frames a stream may have in flight (its window)")
    p.add_argument("--buffer", type=int, default=64, help="tokens a stream may wait in the frontend before it pauses")
    p.add_argument("--no-mux", action="store_true", help="every stream on its own TCP connection (the per-stream path)")
    p.add_argument("--accept-timeout", type=float, default=60.0,
                   help="seconds a request's stream may take to open at the engine before the request fails (0.1 to 3600)")
    p.add_argument("--psk-file", help="a pre-shared key file: channels authenticated both ways")
    p.add_argument("--max-requests", type=int, default=4096, help="requests in flight at most; past it 503 (1 to 1000000)")
    p.add_argument("--write-timeout", type=float, default=30.0,
                   help="seconds a client may leave a full socket buffer unread before it is cut (0.1 to 3600)")
    p.add_argument("--header-timeout", type=float, default=10.0,
                   help="seconds a connection may take to send a whole request head (1 to 3600)")
    p.add_argument("--max-connections", type=int, default=8192,
                   help="connections at most; past it the newest that sent no request are closed (16 to 1000000)")
    args = p.parse_args(argv)
    # Each bound says its flag and range (nan and inf fail every one).
    for flag, value, lo, hi, unit in (("--header-timeout", args.header_timeout, 1, 3600, " seconds"),
                                      ("--max-connections", args.max_connections, 16, 1_000_000, ""),
                                      ("--max-requests", args.max_requests, 1, 1_000_000, ""),
                                      ("--write-timeout", args.write_timeout, 0.1, 3600, " seconds"),
                                      ("--credit", args.credit, 1, 65535, " frames"),
                                      ("--buffer", args.buffer, 1, 1_000_000, " tokens"),
                                      ("--accept-timeout", args.accept_timeout, 0.1, 3600, " seconds")):
        if not lo <= value <= hi:
            p.error(f"{flag} {value}: give {lo} to {hi}{unit}")
    host, _, port = args.http.rpartition(":")
    if not host or not port.isdigit() or int(port) > 65535:
        p.error(f"--http {args.http}: give IP:PORT")
    if not args.engine.startswith("http://"):
        p.error(f"--engine {args.engine}: give http://IP:PORT")
    try:
        app, fe = make_app(args)
    except (ValueError, RuntimeError, OSError) as e:  # a key file, the control address: said, not a traceback
        p.error(str(e))
    print(f"frontend: http://{args.http}/v1/completions, node {fe.node.control_address} "
          f"({'per-stream' if args.no_mux else 'mux'}), engine {args.engine}", flush=True)
    # Descriptors up to the hard limit: out of them, asyncio's accept loop
    # spins and logs at every wake-up (review helper-32).
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and (hard == resource.RLIM_INFINITY or soft < hard):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard if hard != resource.RLIM_INFINITY else max(soft, 65536), hard))
    try:
        asyncio.run(serve(app, host, int(port), args))
    except OSError as e:  # the HTTP address in use, or not this host's
        print(f"frontend: --http {args.http}: {e}", file=sys.stderr)
        return 2
    return 0


async def serve(app, host, port, args):
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    # An idle keep-alive connection is closed at the header timeout too (not aiohttp's 75 s).
    runner = web.AppRunner(app, access_log=None, keepalive_timeout=args.header_timeout)
    sweeper = None
    try:
        await runner.setup()
        site = web.TCPSite(runner, host, port, backlog=1024)
        await site.start()
        sweeper = asyncio.create_task(sweep_idle(runner.server, args.header_timeout, args.max_connections))
        await stop.wait()
    finally:
        if sweeper is not None:
            sweeper.cancel()
        await runner.cleanup()  # on_cleanup: the engine session closes, the node's reader is removed


if __name__ == "__main__":
    sys.exit(main())
