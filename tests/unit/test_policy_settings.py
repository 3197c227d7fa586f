"""What the engine asks of each policy's settings besides its knobs."""

from __future__ import annotations

from memfold.core.settings import POLICY_NAMES, Settings


def test_only_a_policy_with_the_lazy_fallback_lets_a_read_wait_for_its_summary():
    settings = Settings.load(None, hierarchical={"lazy_timeout_ms": 750})
    waits = {name: settings.policy_settings(name).read_wait_ms() for name in POLICY_NAMES}
    assert waits == {name: 750 if name == "hierarchical" else 0 for name in POLICY_NAMES}
