"""Nothing crosses the validation boundary unchecked: a refused message leaves the real log untouched."""

from __future__ import annotations

import pytest
from support.client_engine import stored  # the `engine` fixture comes from the same module (tests/conftest.py)

from memfold.core.errors import ValidationError
from memfold.core.events import ToolCall


@pytest.mark.parametrize("call", [
    ToolCall.model_construct(id=5, name="f", arguments="{}"),
    ToolCall(id="t" * 10_000, name="f"),
    ToolCall.model_construct(id="t", name=["f"], arguments="{}"),
], ids=["model_construct id=5", "10,000-character id", "model_construct name list"])
def test_a_tool_call_instance_the_projector_could_not_read_is_refused_and_nothing_appended(engine, call):
    with pytest.raises(ValidationError) as info:
        engine.append_message("c1", "assistant", "calling", tool_calls=[call])
    assert info.value.field.startswith("tool_calls[0].")
    with pytest.raises(ValidationError):
        engine.append_many([{"conversation_id": "c1", "role": "user", "content": "fine"},
                            {"conversation_id": "c1", "role": "assistant", "content": "x", "tool_calls": [call]}])
    assert stored(engine) == []
    engine.append_message("c1", "assistant", "calling", tool_calls=[ToolCall(id="t1", name="f")])
    assert [e.payload.tool_calls for e in stored(engine)] == [(ToolCall(id="t1", name="f"),)]
