"""ringfire — the stream multiplexer from Python.

A Node carries thousands of token streams per peer in batched messages.
The consumer (an API server) makes anchors and hands their handles to a
producer (a decode loop), which attaches and sends:

    consumer = ringfire.Node(instance_id="frontend-1", control="198.18.0.1:7600")
    anchor = consumer.create_anchor()          # anchor.handle goes to the producer
    producer = ringfire.Node(instance_id="engine-1", control="198.18.0.2:7600", flush="manual")
    sender = producer.attach(handle, "198.18.0.1:7600")
    producer.send_many([(sender, b"token")], flush=True)   # a decode step in one call
    for anchor_id, kind, session, payload in consumer.poll():   # every ready anchor in one call
        ...

`ringfire.aio` puts a Node in an asyncio event loop (one add_reader on
node.fd(), `await anchor.recv()`, `async for token in anchor`);
`ringfire.frontend` is an SSE token server built on it.
"""
from ._ringfire import Anchor, Node, Sender, has_dpdk, start_dpdk

__all__ = ["Anchor", "Node", "Sender", "has_dpdk", "start_dpdk"]
