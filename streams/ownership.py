"""Partition ownership in distributed mode: which worker folds and summarizes which partitions.

Ownership is all that distributed mode adds to the pipeline. Two ways to
decide it:

- :class:`StaticPartitions`: a fixed list per worker (one pod per slice of
  partitions; nothing moves unless you redeploy);
- :class:`ConsumerGroup`: a kafka-python consumer group on the events topic.
  The group only assigns partitions: they are paused at once, so the group
  consumer never fetches a record (the runner reads through the
  :class:`~memfold.core.ports.EventLog` from the positions stored with the
  projection rows). Kafka's committed offsets are advisory: they mirror the
  store's positions so ``kafka-consumer-groups.sh`` shows each worker's lag.

Exclusivity: a rebalance revokes partitions inside :meth:`ConsumerGroup.poll`,
which the worker calls between fold steps, so no batch of a revoked
partition is in flight when the group hands it to another member. A member
that dies (SIGKILL) loses its partitions when its session times out.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from kafka import ConsumerRebalanceListener, KafkaConsumer, TopicPartition
from kafka.errors import KafkaError
from kafka.structs import MemberState, OffsetAndMetadata

from memfold.core.errors import ConfigError, LogUnavailableError

log = logging.getLogger("memfold.ownership")

METADATA_MAX_AGE_MS = 5_000  # how stale the group leader's view of the topic's partitions may get
STUCK_SYNC_S = 5.0  # a member that joined a generation and has no assignment for it this long joins again


class PartitionOwnership(Protocol):
    """Tells a worker which partitions it owns right now."""

    def poll(self, timeout: float) -> set[int]:
        """Wait up to ``timeout`` seconds for membership changes; return the partitions owned now."""
        ...

    def committed(self, positions: dict[int, int]) -> bool:
        """Record that the store has applied every offset below ``positions[partition]`` (advisory).

        Return False when it could not be recorded now (the caller offers it again).
        """
        ...

    def close(self) -> None: ...


class StaticPartitions:
    """A fixed partition list (``memfold worker --partitions 0,1,2``)."""

    def __init__(self, partitions: Iterable[int], partition_count: int):
        owned = set(partitions)
        bad = sorted(p for p in owned if not 0 <= p < partition_count)
        if not owned or bad:
            raise ConfigError(
                f"partitions {sorted(owned)} do not fit a log of {partition_count} partitions "
                f"(0..{partition_count - 1}); name at least one that exists"
            )
        self._owned = owned

    def poll(self, timeout: float) -> set[int]:
        """Return the fixed list (never changes)."""
        return set(self._owned)

    def committed(self, positions: dict[int, int]) -> bool:
        """Nothing to record: the store's positions are the only ones."""
        return True

    def close(self) -> None:
        """Nothing to close."""


class ConsumerGroup:
    """Partition ownership by a Kafka consumer group (kafka-python), records never fetched.

    ``on_revoke(partitions)`` runs inside :meth:`poll` before the partitions
    go to another member: the worker stops answering their requests there.
    """

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        group_id: str,
        *,
        client_id: str = "memfold-worker",
        session_timeout_s: float = 10.0,
        timeout: float = 15.0,
        on_revoke: Callable[[set[int]], None] = lambda partitions: None,
    ):
        self.topic = topic
        self.group_id = group_id
        self._on_revoke = on_revoke
        self._owned: set[int] = set()
        self._lock = threading.Lock()
        self._stable_generation = -1  # the generation of the member's last applied assignment
        self._unsynced: tuple[int, float] | None = None  # (generation, since when) joined with no assignment
        session_ms = int(session_timeout_s * 1000)
        try:
            self._consumer = KafkaConsumer(
                bootstrap_servers=bootstrap,
                group_id=group_id,
                client_id=client_id,
                enable_auto_commit=False,
                auto_offset_reset="earliest",
                session_timeout_ms=session_ms,
                heartbeat_interval_ms=max(100, session_ms // 5),
                # A fold step is short, but a backlog batch on a loaded machine may not be:
                # losing the group over a slow step would only cost a rebalance.
                max_poll_interval_ms=300_000,
                # The group leader assigns from its metadata, and kafka-python asks to rejoin only
                # when a metadata refresh shows the topic's partitions changed (a topic created after
                # the worker started, or grown): at its default age (5 minutes) such a member owns
                # nothing for minutes. 5 s bounds that wait; the request is a few hundred bytes.
                metadata_max_age_ms=METADATA_MAX_AGE_MS,
                request_timeout_ms=max(int(timeout * 1000), session_ms + 5000),
                bootstrap_timeout_ms=int(timeout * 1000),
                reconnect_backoff_max_ms=1000,
            )
            self._consumer.subscribe([topic], listener=_Listener(self))
            # Learn the topic's partitions before the first join. Otherwise the leader assigns
            # from an empty view, and the metadata that follows starts a second rebalance, the
            # kind kafka-python 3.0.12 can lose (see poll).
            self._consumer.topics()
        except (KafkaError, OSError) as exc:
            raise LogUnavailableError(
                f"cannot join consumer group {group_id!r} on {bootstrap} within {timeout}s: {exc}; "
                "check the address and that the broker is up"
            ) from exc

    def poll(self, timeout: float) -> set[int]:
        """Drive the group protocol for up to ``timeout`` seconds; return the partitions owned now.

        kafka-python 3.0.12 can lose an assignment: when the leader rebalances because the
        topic's partitions changed and a poll times out during that rebalance, the join
        completes in the background and nothing applies its assignment. The member then
        owns nothing and stays "rebalancing", in a generation it never got an assignment
        for, for good. A member in that state for ``STUCK_SYNC_S`` joins the group again.
        """
        self._check_join()
        try:
            self._consumer.poll(timeout_ms=int(timeout * 1000), max_records=1)
        except (KafkaError, OSError) as exc:  # the coordinator moved or the broker restarts: retry next poll
            log.warning("consumer group %s: %s", self.group_id, exc)
        with self._lock:
            return set(self._owned)

    def _check_join(self) -> None:
        member = self._consumer.group_metadata()
        if member.state == MemberState.STABLE:
            self._stable_generation = member.generation_id
            self._unsynced = None
        elif member.state == MemberState.REBALANCING and member.generation_id > self._stable_generation:
            # Joined a new generation, its assignment not applied yet: normally one SyncGroup round trip.
            # Timed per generation: a group that keeps rebalancing (members starting one after another)
            # moves on to new generations, while the lost assignment stays in one.
            now = time.monotonic()
            if self._unsynced is None or self._unsynced[0] != member.generation_id:
                self._unsynced = (member.generation_id, now)
            elif now - self._unsynced[1] > STUCK_SYNC_S:
                self._join_again(member.generation_id, now - self._unsynced[1])
        else:
            self._unsynced = None

    def _join_again(self, generation: int, waited: float) -> None:
        log.warning(
            "consumer group %s: joined generation %d but got no assignment for %.0fs; joining again",
            self.group_id, generation, waited,
        )
        self._revoked(set(self._owned))
        self._unsynced = None
        self._stable_generation = -1  # a new member: the group may count generations from 1 again
        try:
            self._consumer.unsubscribe()
            self._consumer.subscribe([self.topic], listener=_Listener(self))
        except (KafkaError, OSError) as exc:  # tried again after another STUCK_SYNC_S
            log.warning("consumer group %s: joining again failed: %s", self.group_id, exc)

    def committed(self, positions: dict[int, int]) -> bool:
        """Commit ``positions`` of owned partitions as the group's offsets; False when the commit failed."""
        with self._lock:
            offsets = {
                TopicPartition(self.topic, p): OffsetAndMetadata(o, "", -1)
                for p, o in positions.items() if p in self._owned
            }
        if not offsets:
            return True
        try:
            self._consumer.commit(offsets)
        except (KafkaError, OSError) as exc:  # a rebalance in progress: the worker offers them again
            log.debug("advisory offset commit failed (offered again): %s", exc)
            return False
        return True

    def close(self) -> None:
        """Leave the group (its partitions go to the other members at once) and close the consumer."""
        try:
            self._consumer.close(autocommit=False)
        except Exception:  # closing must not hide the error that made the caller close
            pass

    # ------------------------------------------------------------------ rebalance callbacks

    def _assigned(self, partitions: set[int], tps: list[Any]) -> None:
        if tps:
            self._consumer.pause(*tps)  # ownership only: the runner reads through the EventLog
        with self._lock:
            self._owned |= partitions
        log.info("consumer group %s: assigned %s, owning %s", self.group_id, sorted(partitions), sorted(self._owned))

    def _revoked(self, partitions: set[int]) -> None:
        if partitions:
            self._on_revoke(partitions)  # still owned meanwhile: their last positions get committed
        with self._lock:
            self._owned -= partitions
        if partitions:
            log.info("consumer group %s: revoked %s, owning %s", self.group_id, sorted(partitions), sorted(self._owned))


class _Listener(ConsumerRebalanceListener):
    def __init__(self, group: ConsumerGroup):
        self._group = group

    def on_partitions_revoked(self, revoked: Any) -> None:
        self._group._revoked({tp.partition for tp in revoked})

    def on_partitions_assigned(self, assigned: Any) -> None:
        self._group._assigned({tp.partition for tp in assigned}, list(assigned))

    def on_partitions_lost(self, lost: Any) -> None:
        self._group._revoked({tp.partition for tp in lost})
