"""Composition of a shard node: its partition ownership, the node directory, the thread that applies them.

``memfold project`` and ``memfold serve`` over Kafka call :func:`open_shards`
after opening a ``projector`` engine with ``partitions=[]`` (own nothing
until told): a fixed ``--partitions`` list or a consumer group of projector
nodes (``--group``) decides what it folds (:mod:`memfold.engine.shard_node`),
and the node directory (``TOPIC.nodes``, :mod:`memfold.streams.shard_directory`)
tells routers where each partition is served.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from memfold.core.errors import ConfigError
from memfold.core.settings import Settings
from memfold.engine.shard_node import ShardNode
from memfold.streams.compacted_topic import CompactedTopic
from memfold.streams.ownership import ConsumerGroup, StaticPartitions
from memfold.streams.shard_directory import ShardDirectory

DEFAULT_GROUP = "memfold-projector.{topic}"


def directory_topic(settings: Settings) -> str:
    """Return the node directory's topic: ``TOPIC.nodes`` beside the events topic."""
    return f"{settings.topic}.nodes"


def open_directory(settings: Settings, node_id: str, url: str | None) -> ShardDirectory:
    """Open the node directory of ``settings``' Kafka log for node ``node_id`` served at ``url``."""
    bootstrap = _bootstrap(settings)
    return ShardDirectory(CompactedTopic(bootstrap, directory_topic(settings), client_id="memfold-nodes"), node_id, url)


@dataclass
class Shards:
    """What :func:`open_shards` started; :meth:`close` stops it (before the engine closes)."""

    node: ShardNode
    description: str

    def close(self) -> None:
        self.node.close()


def open_shards(engine, *, partitions: list[int] | None, group: str | None, directory: ShardDirectory | None,
                session_timeout: float = 10.0, timeout: float = 15.0) -> Shards:
    """Start folding the partitions a fixed list or a consumer group gives ``engine`` (a projector with ``partitions=[]``).

    Raises :class:`ConfigError` for a list that does not fit the topic and
    :class:`~memfold.core.errors.LogUnavailableError` when the group
    cannot be joined.
    """
    settings = engine.settings
    if partitions is not None and group is not None:
        raise ConfigError("pass either --partitions (a fixed list) or --group (share through a consumer group), not both")
    holder: list[ShardNode] = []
    if partitions is not None:
        ownership = StaticPartitions(partitions, engine.log.partition_count)
        description = f"partitions {sorted(partitions)}"
    else:
        group_id = group or DEFAULT_GROUP.format(topic=settings.topic)
        ownership = ConsumerGroup(_bootstrap(settings), settings.topic, group_id, client_id="memfold-projector",
                                  session_timeout_s=session_timeout, timeout=timeout,
                                  on_revoke=lambda parts: holder[0].revoke(parts))
        description = f"group {group_id}"
    node = ShardNode(engine.runner, ownership, directory)
    holder.append(node)
    node.start()
    return Shards(node, description)


def _bootstrap(settings: Settings) -> str:
    url = settings.log_url()
    if not url.startswith("kafka://"):
        raise ConfigError(f"shard nodes run on a Kafka log (kafka://HOST:PORT), not {url}")
    return urlsplit(url).netloc
