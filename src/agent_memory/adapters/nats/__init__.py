"""NATS JetStream transport (extra `nats`: nats-py).

`JetStreamBus` connects, makes streams, durable pull consumers and key-value
buckets, and publishes; `KeyValueCache` is the `Cache` port on a key-value
bucket. The graph memory processor that drives them is an entry point:
`agent_memory.entrypoints.processor`.
"""

from agent_memory.adapters.nats.jetstream import (
    Delivery,
    JetStreamBus,
    KeyValueBucket,
    KeyValueChange,
    PullConsumer,
    subject_token,
)
from agent_memory.adapters.nats.kv_cache import KeyValueCache

__all__ = [
    "Delivery",
    "JetStreamBus",
    "KeyValueBucket",
    "KeyValueCache",
    "KeyValueChange",
    "PullConsumer",
    "subject_token",
]
