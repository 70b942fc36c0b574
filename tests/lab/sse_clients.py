"""sse_clients.py — real HTTP clients (aiohttp's) against ringfire.frontend:
N concurrent streaming completions, every token checked (its index in
order, then `data: [DONE]`), the first K clients disconnecting after D
tokens. Prints one JSON line: completed, disconnected, bad, tokens,
per-token latency (the engine's send time to the client's read, one
clock: the lab's hosts share it), tokens/s.

  python3 sse_clients.py URL --requests N --tokens T [--disconnect K --after D]
"""
import argparse
import asyncio
import json
import sys
import time

import aiohttp


async def one(session, url, tokens, disconnect_after, tally):
    want = 0
    async with session.post(url, json={"prompt": "x", "max_tokens": tokens, "stream": True}) as r:
        if r.status != 200:
            tally["bad"] += 1
            tally["errors"].append(f"status {r.status}: {(await r.text())[:200]}")
            return
        async for line in r.content:
            if not line.startswith(b"data: "):
                continue
            data = line[6:].strip()
            if data == b"[DONE]":
                if want == tokens:
                    tally["completed"] += 1
                else:
                    tally["bad"] += 1
                    tally["errors"].append(f"[DONE] after {want} of {tokens}")
                return
            tok = json.loads(data)["choices"][0]  # OpenAI's "text", and the engine's index and send time
            now = time.monotonic_ns()
            if tok["i"] != want:
                tally["bad"] += 1
                tally["errors"].append(f"token {tok['i']} where {want} was due")
                return
            want += 1
            tally["tokens"] += 1
            tally["lat"].append(now - tok["t"])
            if tally["first"] is None:
                tally["first"] = now
            tally["last"] = now
            if disconnect_after and want == disconnect_after:
                tally["disconnected"] += 1
                r.close()  # the connection goes: the frontend cancels the stream
                return
    tally["bad"] += 1
    tally["errors"].append(f"the stream ended after {want} tokens without [DONE]")


async def main():
    p = argparse.ArgumentParser()
    p.add_argument("url")
    p.add_argument("--requests", type=int, default=100)
    p.add_argument("--tokens", type=int, default=20)
    p.add_argument("--disconnect", type=int, default=0)
    p.add_argument("--after", type=int, default=5)
    # The disconnecting requests ask for this many tokens (default --tokens): a
    # long stream, so that a client the machine's load makes late to read its
    # D-th token still leaves before the frontend wrote the last one.
    p.add_argument("--disconnect-tokens", type=int, default=0)
    p.add_argument("--timeout", type=float, default=120)
    a = p.parse_args()
    tally = {"completed": 0, "disconnected": 0, "bad": 0, "tokens": 0, "lat": [], "errors": [], "first": None, "last": None}
    timeout = aiohttp.ClientTimeout(total=a.timeout)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), timeout=timeout) as s:
        jobs = [one(s, a.url, (a.disconnect_tokens or a.tokens) if i < a.disconnect else a.tokens,
                    a.after if i < a.disconnect else 0, tally) for i in range(a.requests)]
        results = await asyncio.gather(*jobs, return_exceptions=True)
    for r in results:
        if isinstance(r, Exception):
            tally["bad"] += 1
            tally["errors"].append(repr(r)[:200])
    lat = sorted(tally.pop("lat"))
    q = lambda f: lat[min(len(lat) - 1, int(f * len(lat)))] / 1000 if lat else 0
    first, last = tally.pop("first"), tally.pop("last")
    tally["latency_us"] = {"p50": q(0.5), "p99": q(0.99)}
    tally["tokens_per_s"] = tally["tokens"] / ((last - first) / 1e9) if first and last > first else 0
    tally["errors"] = tally["errors"][:5]
    print(json.dumps(tally), flush=True)
    return 0 if tally["bad"] == 0 else 3


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
