"""Where settings come from: keyword overrides > MEMFOLD_* environment > memfold.toml > defaults."""

from __future__ import annotations

import pytest

from memfold.core.errors import ConfigError
from memfold.core.settings import Settings, env_values


def test_environment_names_are_case_insensitive_and_reach_into_sections():
    values = env_values({
        "MEMFOLD_HIERARCHICAL__TRIGGER_MESSAGE_COUNT": "30",
        "memfold_summarizer__kind": "openai",
        "MEMFOLD_PARTITIONS": "4",
        "MEMFOLD_URL": "http://elsewhere",  # not a setting (the CLI's): skipped
        "MEMFOLD_CONFIG": "x.toml",
        "HOME": "/root",
    })
    assert values == {"hierarchical": {"trigger_message_count": "30"}, "summarizer": {"kind": "openai"},
                      "partitions": "4"}


def test_structured_values_are_json_and_policies_also_a_comma_list():
    values = env_values({"MEMFOLD_TENANT_POLICIES": '{"acme": "topics"}', "MEMFOLD_POLICIES": "rolling, topics",
                         "MEMFOLD_CONTEXT": '{"user_share": 0.2}'})
    assert values == {"tenant_policies": {"acme": "topics"}, "policies": "rolling, topics",
                      "context": {"user_share": 0.2}}
    assert env_values({"MEMFOLD_TENANT_POLICIES__ACME": "topics"}) == {"tenant_policies": {"acme": "topics"}}
    with pytest.raises(ConfigError, match="MEMFOLD_TENANT_POLICIES is not JSON"):
        env_values({"MEMFOLD_TENANT_POLICIES": "acme=topics"})


def test_sources_in_order_of_strength(tmp_path, monkeypatch):
    toml = tmp_path / "memfold.toml"
    toml.write_text('policy = "rolling"\npartitions = 2\n[hierarchical]\ntrigger_message_count = 40\n'
                    'recent_message_count = 7\n')
    monkeypatch.setenv("MEMFOLD_HIERARCHICAL__TRIGGER_MESSAGE_COUNT", "30")
    monkeypatch.setenv("MEMFOLD_PARTITIONS", "3")
    monkeypatch.setenv("MEMFOLD_POLICIES", "sliding_window,hierarchical")
    s = Settings.load(toml, partitions=5, log=None)
    assert s.policy == "rolling"  # the file's
    assert s.hierarchical.trigger_message_count == 30  # the environment's, over the file's
    assert s.hierarchical.recent_message_count == 7  # the file's: a section is merged key by key
    assert s.partitions == 5  # the keyword's, over both
    assert s.policies == ("sliding_window", "hierarchical")
    assert s.log is None


def test_the_constructor_reads_no_environment(monkeypatch):
    monkeypatch.setenv("MEMFOLD_PARTITIONS", "3")
    assert Settings().partitions == 8
    assert Settings.load().partitions == 3


def test_invalid_values_name_the_setting(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMFOLD_HIERARCHICAL__TRIGGER_MESSAGE_COUNT", "0")
    with pytest.raises(ConfigError, match="hierarchical.trigger_message_count"):
        Settings.load()
    monkeypatch.delenv("MEMFOLD_HIERARCHICAL__TRIGGER_MESSAGE_COUNT")
    monkeypatch.setenv("MEMFOLD_HIERARCHICAL__NO_SUCH_KNOB", "1")
    with pytest.raises(ConfigError, match="no_such_knob"):
        Settings.load()
    bad = tmp_path / "bad.toml"
    bad.write_text("policy = \n")
    monkeypatch.delenv("MEMFOLD_HIERARCHICAL__NO_SUCH_KNOB")
    with pytest.raises(ConfigError, match="invalid memfold settings"):
        Settings.load(bad)
