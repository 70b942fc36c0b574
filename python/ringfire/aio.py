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
import weakref

# The nodes an AsyncNode reads, each to a weak reference to it: a second
# one would take the first's add_reader, and its anchors would never hear
# again. Weak both ways (the AsyncNode holds its node): an entry holds
# nothing alive.
_read_by = weakref.WeakKeyDictionary()


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

    __slots__ = ("_anode", "anchor", "_items", "_waiter", "_buffer", "_paused", "_loop")

    def __init__(self, anode, anchor, buffer):
        self._anode = anode
        self._loop = anode.loop
        self.anchor = anchor
        self._items = collections.deque()  # node.poll() tuples: (anchor_id, kind, session, payload)
        self._waiter = None  # set (to None) when an item is queued
        self._buffer = buffer
        self._paused = False

    @property
    def handle(self):
        return self.anchor.handle

    @property
    def id(self):
        return self.anchor.id

    def ready(self):
        """the number of items waiting here (taken from the node already)."""
        return len(self._items)

    def _pause(self):
        self._paused = True
        self.anchor.pause()

    def _new_waiter(self):
        # One reader at a time (as asyncio's own streams): a second task's
        # future took the first's place, and the first waited for ever with
        # an item queued (review helper-36).
        if self._waiter is not None:
            raise RuntimeError("another task is already waiting on this anchor: read it from one task")
        w = self._waiter = self._loop.create_future()
        return w

    async def _wait(self):
        w = self._new_waiter()
        try:
            await w
        finally:
            self._waiter = None

    def _take(self):
        item = self._items.popleft()
        if self._paused and len(self._items) <= self._buffer // 2:
            self._paused = False
            self.anchor.resume()
        return item

    async def recv(self):
        """the next item: (kind, session, payload); waits for it."""
        while not self._items:
            await self._wait()
        _, kind, session, payload = self._take()
        return kind, session, payload

    def __aiter__(self):
        return self

    def __anext__(self):
        # The hot path of a frontend, one token per call. An item already
        # here: a done future (no coroutine made; `await` does not
        # suspend). None: a coroutine that waits, then takes the item, so a
        # reader cancelled as the item arrives leaves it queued for the
        # next one (an item handed over in the future itself would be lost
        # with the cancelled reader).
        if self._items:
            f = self._loop.create_future()
            _settle(f, self._take())
            return f
        return self._wait_next()

    async def _wait_next(self):
        items = self._items
        while not items:
            w = self._new_waiter()
            try:
                await w
            finally:
                self._waiter = None
        item = self._take()
        kind = item[1]
        if kind == "data":
            return item[3]
        if kind == "finished":
            raise StopAsyncIteration
        raise StreamDropped(item[3], item[2])

    def cancel(self):
        """end every stream of the anchor (its producers see closed senders)."""
        self.anchor.cancel()

    def close(self):
        """cancel and forget the anchor (its handle is refused from now on)."""
        self.anchor.cancel()
        self._anode._anchors.pop(self.anchor.id, None)


def _settle(f, item):
    """completes an `async for` step's future with a queued node.poll()
    item: the token, the end of the iteration, or the drop."""
    kind = item[1]
    if kind == "data":
        f.set_result(item[3])
    elif kind == "finished":
        f.set_exception(StopAsyncIteration())
    else:
        f.set_exception(StreamDropped(item[3], item[2]))


class AsyncNode:
    """A Node's consumer side in an asyncio loop (create it inside the loop).
    It reads every anchor of the node (one poll() for all): make them with
    its create_anchor, not the node's; one AsyncNode per node at a time."""

    def __init__(self, node, buffer=64, loop=None):
        self.node = node
        self.loop = loop or asyncio.get_running_loop()
        self.buffer = max(2, buffer)
        self._anchors = {}
        self.unclaimed = 0  # items of anchors not made here (Node.create_anchor beside this): poll() took them
        reader = _read_by.get(node, lambda: None)()
        if reader is not None and reader._fd is not None and not reader.loop.is_closed():
            raise RuntimeError("this node is read by an AsyncNode already: make every anchor with that one")
        self._fd = node.fd()
        self.loop.add_reader(self._fd, self._on_ready)
        _read_by[node] = weakref.ref(self)

    def create_anchor(self, multi_sender=False):
        a = AsyncAnchor(self, self.node.create_anchor(multi_sender), self.buffer)
        self._anchors[a.id] = a
        return a

    def _on_ready(self):
        # Every ready item of every anchor in one call, handed to its anchor
        # (inline: this loop runs once per token).
        get = self._anchors.get
        polled = self.node.poll()
        for item in polled:
            a = get(item[0])
            if a is None:  # not ours (made with node.create_anchor, or closed here): counted, not kept
                self.unclaimed += 1
                continue
            items = a._items
            items.append(item)
            w = a._waiter
            if w is not None:
                a._waiter = None
                if not w.done():
                    w.set_result(None)
            elif not a._paused and len(items) >= a._buffer:
                a._pause()
        if polled:
            # After the tasks these items woke (their wake-ups are scheduled
            # already): the node thread's wake that poll() put off goes then,
            # not at the next readiness (a quiet stream's position report
            # would wait for that, or for the node's own turn).
            self.loop.call_soon(self._idle)

    def _idle(self):
        if self._fd is not None:  # not closed since
            self.node.idle()

    def close(self):
        """stop reading (the anchors stay; call again from a loop to read them).
        Close this before the Node (node.close()): its descriptor goes with it."""
        if self._fd is not None:
            self.loop.remove_reader(self._fd)
            self._fd = None
            if _read_by.get(self.node, lambda: None)() is self:
                del _read_by[self.node]
