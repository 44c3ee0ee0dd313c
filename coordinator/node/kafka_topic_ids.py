"""The Kafka listener's topic ids: `kafka_wire.topic_map.TopicIds` filled from ZooKeeper, off the event loop.

A topic's id is read by `topics.topic_ids.known_topic_id`, and minted (for a topic registered by
another tool) by `ensure_topic_id` only when an answer assigns or describes a topic that has
none. Metadata answers learn the ids of the topics they list; a heartbeat that owns a topic id
the node has not seen, or an answer that names a topic it has no id for yet, waits for one read
here first.

    resolver = TopicIdResolver(node)
    await resolver.learn_names({"clicks"})       # then resolver.ids.id_of("clicks")
    await resolver.learn_ids({some_uuid})         # unknown ids: every registered topic is read
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Iterable
from typing import Any

from coordinator.kafka_wire.topic_map import TopicIds
from core.errors import GroupshiftError
from topics.registry import list_topics
from topics.topic_ids import ensure_topic_id, known_topic_id

log = logging.getLogger("coordinator.node.server")

# An id still unknown after every topic was read (a deleted topic a client still names) does
# not make the node read every topic again for this long.
RESCAN_INTERVAL_S = 5.0


class TopicIdResolver:
    def __init__(self, node: Any):
        self.node = node
        self.ids = TopicIds()
        self._scanned = float("-inf")

    def read(self, names: Iterable[str], mint: bool = False) -> dict[str, uuid.UUID]:
        """The ids of `names` that are registered (blocking: call it in a thread). Only `mint`
        gives an id to a topic that has none: reading metadata changes nothing in ZooKeeper, and
        a topic gets its id when a consumer-protocol member is assigned it."""
        out = {}
        for name in names:
            try:
                found = (ensure_topic_id if mint else known_topic_id)(self.node.zk, name)
            except GroupshiftError:
                continue  # not registered (any more), or unreadable: no id
            if found is not None:
                out[name] = found
        return out

    def learn(self, found: dict[str, uuid.UUID]) -> None:
        for name, topic_id in found.items():
            self.ids.learn(name, topic_id)

    async def learn_names(self, names: Iterable[str]) -> None:
        missing = self.ids.unknown_names(names)
        if missing:
            self.learn(await asyncio.to_thread(self.read, sorted(missing), True))

    async def learn_ids(self, ids: Iterable[uuid.UUID | None]) -> None:
        """Learn every registered topic's id when one of `ids` is unknown (a topic another node
        named to the client, or one deleted since)."""
        if self.ids.unknown_ids(ids) and time.monotonic() - self._scanned >= RESCAN_INTERVAL_S:
            self._scanned = time.monotonic()
            names = await asyncio.to_thread(list_topics, self.node.zk)
            self.learn(await asyncio.to_thread(self.read, names))
