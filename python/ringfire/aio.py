"""ringfire.aio — a Node's anchors read from an asyncio event loop.

One descriptor per node (node.fd()) is registered with loop.add_reader;
when it is readable, one node.poll() call takes every ready item of every
anchor and hands each to its AsyncAnchor. No thread per anchor, no
polling: the event loop sleeps until a channel delivers. An anchor whose
reader falls behind (its HTTP client stopped reading) is paused once
`buffer` items wait in it: its items then stay in the node, its credit
stops and its producer slows down — that stream alone.

    node = ringfire.Node(instance_id=..., control=...)
    anode = ringfire.aio.AsyncNode(node)          # inside a running loop
    anchor = anode.create_anchor()
    ... give anchor.handle to a producer ...
    async for token in anchor:                    # until the stream finishes
        ...
"""
import asyncio
import collections


class StreamDropped(Exception):
    """The stream ended without its terminal: the producer went away, the
    channel died, it was never claimed, ... (`reason`)."""

    def __init__(self, reason, session):
        super().__init__(f"stream dropped: {reason}")
        self.reason = reason
        self.session = session


class AsyncAnchor:
    """One anchor in the event loop. recv() returns (kind, session, payload)
    items as Anchor.recv does; iterating yields a single-sender stream's
    tokens until it finishes (StreamDropped if it is dropped)."""

    def __init__(self, anode, anchor, buffer):
        self._anode = anode
        self.anchor = anchor
        self._items = collections.deque()
        self._waiter = None
        self._buffer = buffer
        self._paused = False

    @property
    def handle(self):
        return self.anchor.handle

    @property
    def id(self):
        return self.anchor.id

    def _push(self, kind, session, payload):
        self._items.append((kind, session, payload))
        if not self._paused and len(self._items) >= self._buffer:
            self._paused = True
            self.anchor.pause()
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)

    def ready(self):
        """the number of items waiting here (taken from the node already)."""
        return len(self._items)

    async def recv(self):
        """the next item: (kind, session, payload); waits for it."""
        while not self._items:
            self._waiter = self._anode.loop.create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        item = self._items.popleft()
        if self._paused and len(self._items) <= self._buffer // 2:
            self._paused = False
            self.anchor.resume()
        return item

    def __aiter__(self):
        return self

    async def __anext__(self):
        kind, session, payload = await self.recv()
        if kind == "data":
            return payload
        if kind == "finished":
            raise StopAsyncIteration
        raise StreamDropped(payload, session)

    def cancel(self):
        """end every stream of the anchor (its producers see closed senders)."""
        self.anchor.cancel()

    def close(self):
        """cancel and forget the anchor (its handle is refused from now on)."""
        self.anchor.cancel()
        self._anode._anchors.pop(self.anchor.id, None)


class AsyncNode:
    """A Node's consumer side in an asyncio loop (create it inside the loop)."""

    def __init__(self, node, buffer=64, loop=None):
        self.node = node
        self.loop = loop or asyncio.get_running_loop()
        self.buffer = max(2, buffer)
        self._anchors = {}
        self._fd = node.fd()
        self.loop.add_reader(self._fd, self._on_ready)

    def create_anchor(self, multi_sender=False):
        a = AsyncAnchor(self, self.node.create_anchor(multi_sender), self.buffer)
        self._anchors[a.id] = a
        return a

    def _on_ready(self):
        anchors = self._anchors
        for anchor_id, kind, session, payload in self.node.poll():
            a = anchors.get(anchor_id)
            if a is not None:
                a._push(kind, session, payload)

    def close(self):
        """stop reading (the anchors stay; call again from a loop to read them)."""
        if self._fd is not None:
            self.loop.remove_reader(self._fd)
            self._fd = None
