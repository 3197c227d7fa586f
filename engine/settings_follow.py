"""Distributed nodes take their policy settings from the log: the newest ``SettingsChanged`` wins (composition code).

On a Kafka log every worker and projector node keeps its own data dir and
configuration, but they fold one log. ``memfold promote`` records the new
settings as a ``SettingsChanged`` event on that log; each node reads the
events' partition (the one of ``_memfold/settings``) and:

- at start, folds with the newest change's settings whatever its own
  configuration says (a warning names both hashes when they differ);
- while running, switches when a newer change appears: a worker drops its
  private projection and folds its partitions again under the new settings
  (it serves no reads); a projector node folds beside and swaps, so its
  reads never see an empty projection.

Why the log wins rather than a refusal: promote is the one audited way to
change settings, and it must reach every node without an operator editing
each node's configuration in the same instant. A node that refused would
crash-loop on every restart or scale-out until each ConfigMap was edited,
and nodes folding with different settings would give one conversation's
memory two shapes depending on which partition it hashes to. An embedded
data dir behaves the same way (its ``promoted.json`` overrides the config).
To change settings, replay and promote; editing a node's configuration
alone is reported and overridden by the log.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any

from memfold.core import overrides as ov
from memfold.core.errors import MemfoldError
from memfold.core.events import SettingsChanged, conversation_key
from memfold.core.partitioner import partition_for
from memfold.core.settings import Settings

if TYPE_CHECKING:
    from memfold.core.ports import EventLog
    from memfold.engine.engine import MemoryEngine

log = logging.getLogger("memfold.settings")

SETTINGS_TENANT, SETTINGS_CONVERSATION = "_memfold", "settings"  # where SettingsChanged events are recorded
POLL_SECONDS = 1.0  # how often a running node looks for a new SettingsChanged
_SETTINGS_TYPES = frozenset({SettingsChanged.TYPE})


class SettingsFollower:
    """Reads the settings partition of a log from where it left off; remembers the newest ``SettingsChanged``."""

    def __init__(self, event_log: EventLog, batch: int = 5000):
        self.log = event_log
        self.partition = partition_for(conversation_key(SETTINGS_TENANT, SETTINGS_CONVERSATION),
                                       event_log.partition_count)
        self.offset = 0
        self.batch = batch
        self.latest: Any = None  # the newest SettingsChanged read so far

    def poll(self) -> Any:
        """Read the partition up to its end now; return a ``SettingsChanged`` newer than the last poll's, else None.

        The first poll scans the whole partition (it also holds the
        conversations hashed to it, which the log passes over undecoded);
        later ones only what was appended since.
        """
        end = self.log.end_positions().get(self.partition, 0)
        found = None
        while self.offset < end:
            # Only SettingsChanged events are decoded: the partition's conversations are passed over.
            records, after = self.log.scan(self.partition, self.offset, _SETTINGS_TYPES, self.batch)
            for record in records:
                found = record.event
            if after <= self.offset:
                break
            self.offset = after
        if found is not None:
            self.latest = found
        return found


def settings_of(settings: Settings, change: Any) -> Settings:
    """Return ``settings`` with the policy settings recorded by ``change`` (a ``SettingsChanged``) applied."""
    return ov.apply(settings, {k: v for k, v in change.payload.settings.items() if k != "replay"})


def same_folds(a: Settings, b: Settings) -> bool:
    """True when ``a`` and ``b`` fold and read alike (same read policy, same settings of every folded policy)."""
    return a.policy == b.policy and ov.hashes(a) == ov.hashes(b) and dict(a.tenant_policies) == dict(b.tenant_policies)


def at_start(settings: Settings, follower: SettingsFollower) -> Settings:
    """Return the settings a node starts with: its own, or the log's newest ``SettingsChanged`` if there is one."""
    change = follower.poll()
    if change is None:
        return settings
    wanted = settings_of(settings, change)
    if not same_folds(settings, wanted):
        log.warning(
            "this node's configuration folds with settings %s, but the log's newest SettingsChanged (replay %r, "
            "settings %s) says otherwise: folding with the log's (promote is how settings change; "
            "update this node's configuration to silence this)",
            ov.combined_hash(settings), change.payload.settings.get("replay"), ov.combined_hash(wanted))
    return wanted


class FollowThread:
    """Polls a running engine's log for new ``SettingsChanged`` events and makes the engine adopt them."""

    def __init__(self, engine: MemoryEngine, interval: float = POLL_SECONDS):
        self.engine = engine
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="memfold-settings", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.engine.follow_settings()
            except MemfoldError as exc:  # the broker away, a busy projection: the next poll tries again
                log.warning("following the log's settings failed (will retry): %s", exc)
