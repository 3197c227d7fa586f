"""Nodes sharing a log take their policy settings from its newest SettingsChanged (engine/settings_follow.py)."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from memfold.core import overrides as ov
from memfold.core.events import MessageAppended, MessagePayload, SettingsChanged, SettingsChangedPayload
from memfold.core.settings import Settings
from memfold.engine.settings_follow import (
    SETTINGS_CONVERSATION,
    SETTINGS_TENANT,
    SettingsFollower,
    at_start,
    same_folds,
)
from memfold.streams.sqlite_log import SQLiteEventLog

T0 = datetime(2026, 5, 1, tzinfo=UTC)


def _change(name: str, view: dict) -> SettingsChanged:
    return SettingsChanged(event_id=f"settings-{name}", tenant_id=SETTINGS_TENANT, conversation_id=SETTINGS_CONVERSATION,
                           occurred_at=T0, payload=SettingsChangedPayload(policy=view["policy"],
                                                                          settings={**view, "replay": name}))


def test_the_newest_settings_change_on_the_log_wins_over_the_nodes_configuration(tmp_path, caplog):
    configured = Settings.load(None, data_dir=tmp_path, policy="hierarchical", policies=("hierarchical",))
    wide = ov.apply(configured, {"hierarchical.trigger_message_count": 40})
    narrow = ov.apply(configured, {"hierarchical.trigger_message_count": 8})
    log = SQLiteEventLog(tmp_path / "events.sqlite", partitions=4)
    try:
        follower = SettingsFollower(log, batch=2)
        assert follower.poll() is None and at_start(configured, SettingsFollower(log)) is configured
        chatter = [MessageAppended(event_id=f"m{i}", tenant_id=SETTINGS_TENANT, conversation_id=SETTINGS_CONVERSATION,
                                   occurred_at=T0, payload=MessagePayload(role="user", content=f"hello {i}"))
                   for i in range(5)]  # other events of the same partition are read past
        log.append([chatter[0], _change("wide", ov.policy_view(wide)), *chatter[1:3],
                    _change("narrow", ov.policy_view(narrow)), *chatter[3:]])
        newest = follower.poll()
        assert newest.payload.settings["replay"] == "narrow" and follower.poll() is None  # read once
        with caplog.at_level(logging.WARNING, logger="memfold.settings"):
            started = at_start(configured, SettingsFollower(log))
        assert started.hierarchical.trigger_message_count == 8 and same_folds(started, narrow)
        assert not same_folds(started, configured)
        warned = caplog.text
        assert ov.combined_hash(configured) in warned and ov.combined_hash(narrow) in warned, warned
    finally:
        log.close()
