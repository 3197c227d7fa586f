"""Replay setting overrides: parsing KEY=VALUE, reading a settings file, applying and validating."""

from __future__ import annotations

import pytest

from memfold.core import overrides as ov
from memfold.core.errors import ValidationError
from memfold.core.settings import Settings


def test_assignments_parse_json_values_and_keep_text():
    assert ov.parse_assignments(["hierarchical.trigger_message_count=30", "policy=rolling", "policies=[\"topics\"]"]) == {
        "hierarchical.trigger_message_count": 30, "policy": "rolling", "policies": ["topics"]}
    with pytest.raises(ValidationError, match="KEY=VALUE"):
        ov.parse_assignments(["trigger"])


def test_a_settings_file_gives_its_policy_settings_and_names_what_it_ignores(tmp_path):
    path = tmp_path / "memfold.toml"
    path.write_text('policy = "rolling"\ndata_dir = "x"\n[rolling]\nmessage_threshold = 7\n[summarizer]\nkind = "offline"\n')
    taken, ignored = ov.load_file(path)
    assert taken == {"policy": "rolling", "rolling.message_threshold": 7} and ignored == ["data_dir", "summarizer"]
    path.write_text("policy = ")
    with pytest.raises(ValidationError, match="not valid TOML"):
        ov.load_file(path)


def test_apply_keeps_every_folded_policy_and_validates_each_knob():
    live = Settings.load(None, policy="hierarchical", policies=("hierarchical",))
    out = ov.apply(live, {"policy": "rolling", "rolling.message_threshold": 7})
    assert out.policy == "rolling" and out.active_policies == ("hierarchical", "rolling")
    assert out.rolling.message_threshold == 7 and live.rolling.message_threshold != 7
    assert out.settings_hash("hierarchical") == live.settings_hash("hierarchical")
    assert ov.apply(live, ov.policy_view(out)) == out  # the manifest's view round-trips
    for bad, match in (({"rolling.message_threshold": 0}, "message_threshold"), ({"policy": "nope"}, "unknown policy"),
                       ({"summarizer.kind": "openai"}, "cannot override"), ({"topics.max_topics": 3}, "not folded")):
        with pytest.raises(ValidationError, match=match):
            ov.apply(live, bad)
