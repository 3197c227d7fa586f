"""Message shapes users already have: OpenAI chat, Anthropic Messages, OpenAI Responses items, and memfold's compact form.

One canonical form inside (the keys :mod:`memfold.core.validation` takes:
``role``, ``content`` a string, ``name``, ``tool_calls`` as flat
``{"id", "name", "arguments"}``, ``tool_call_id``); this module converts to it
(:func:`messages_from`, :func:`canonical_openai`) and from it
(:func:`shaped`). Pure: no I/O, no clock. docs/shapes.md maps every field.

What is refused, with a :class:`ValidationError` that names the field:
non-text content (images, audio, files), OpenAI's ``refusal``/``audio``/
``function_call``/``annotations`` when they hold something, tool calls
other than functions, Anthropic ``thinking``/``image``/``document``/server
tool blocks, and Responses items other than messages, ``function_call``
and ``function_call_output`` (``reasoning``, web search, ...).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import msgspec

from memfold.core.errors import ValidationError

if TYPE_CHECKING:
    from memfold.core.ports import ContextMessage

FORMATS = ("openai", "anthropic", "responses", "compact")
INPUT_FORMATS = FORMATS[:3]

# Keys the openai SDK's ChatCompletionMessage.model_dump() always carries; accepted when they hold nothing.
_OPENAI_EMPTY_KEYS = {
    "refusal": "a refusal is not stored: append its text as the assistant's content if you want it kept",
    "annotations": "URL citations are not stored: keep them in metadata if you need them",
    "audio": "audio output is not stored: append its transcript as the assistant's content",
    "function_call": "the deprecated function_call is not accepted: send it as tool_calls "
                     "[{id, type: 'function', function: {name, arguments}}]",
}
_CANONICAL_KEYS = ("role", "content", "name", "tool_calls", "tool_call_id")


def canonical_openai(message: Mapping[str, Any], *, line: int | None = None) -> dict[str, Any]:
    """Return ``message`` (an OpenAI chat message, or memfold's flat form) in the canonical form.

    Accepts ``tool_calls`` in OpenAI's shape ``{"id", "type": "function",
    "function": {"name", "arguments"}}`` or the flat compact alias ``{"id",
    "name", "arguments"}`` (or ``ToolCall`` instances, passed on);
    ``content`` a string, ``None`` or a list of ``{"type": "text", "text"}``
    parts (joined with newlines); the null/empty ``refusal``,
    ``annotations``, ``audio``, ``function_call`` keys of an SDK message
    (dropped); role ``developer`` (read as ``system``). Every other key is
    passed on unchanged for validation to judge. Raises
    :class:`ValidationError` (``field``, ``line``) for what cannot be stored.
    """
    out = dict(message)
    for key, why in _OPENAI_EMPTY_KEYS.items():
        if key in out:
            value = out.pop(key)
            if value not in (None, "", [], {}, ()):
                raise ValidationError(f"{key}: {why}", field=key, line=line)
    if out.get("role") == "developer":
        out["role"] = "system"  # the chat API's newer name for system; memfold stores one system role
    elif out.get("role") == "function":
        raise ValidationError("role: the deprecated 'function' role is not accepted: send the result as "
                              "role 'tool' with the tool_call_id it answers", field="role", line=line)
    if isinstance(out.get("content"), (list, tuple)):
        out["content"] = _text_parts(out["content"], ("text",), "content", line)
    calls = out.get("tool_calls")
    if isinstance(calls, (list, tuple)):
        out["tool_calls"] = [_flat_call(c, i, line) for i, c in enumerate(calls)]
    return out


def _text_parts(parts: Sequence[Any], types: tuple[str, ...], where: str, line: int | None) -> str:
    texts = []
    for i, part in enumerate(parts):
        at = f"{where}[{i}]"
        if isinstance(part, str):  # Responses function_call_output may list plain strings; harmless elsewhere
            texts.append(part)
            continue
        if not isinstance(part, Mapping):
            raise ValidationError(f"{at}: a content part must be an object, got {type(part).__name__}",
                                  field=at, line=line)
        kind = part.get("type")
        if kind not in types:
            raise ValidationError(
                f"{at}: memfold stores text only; a {kind!r:.40} part is not accepted (use parts of type "
                f"{' or '.join(repr(t) for t in types)}; describe an image or file in text or keep a "
                "reference to it in metadata)", field=f"{at}.type", line=line)
        text = part.get("text")
        if not isinstance(text, str):
            raise ValidationError(f"{at}.text: must be a string", field=f"{at}.text", line=line)
        for key, value in part.items():
            # annotations/logprobs (Responses output_text), citations (Anthropic) and cache_control are
            # request or response decoration, not conversation content.
            if key not in ("type", "text", "annotations", "logprobs", "citations", "cache_control"):
                raise ValidationError(f"{at}: unknown key {key!r:.40} in a text part", field=f"{at}.{key}", line=line)
            if key in ("annotations", "citations") and value not in (None, []):
                raise ValidationError(f"{at}.{key}: citations are not stored; drop them or keep them in metadata",
                                      field=f"{at}.{key}", line=line)
        texts.append(text)
    return "\n".join(texts)


def _flat_call(call: Any, i: int, line: int | None) -> Any:
    if not isinstance(call, Mapping) or ("function" not in call and "type" not in call):
        return call  # flat alias or ToolCall: validation checks it field by field
    at = f"tool_calls[{i}]"
    if call.get("type", "function") != "function":
        raise ValidationError(f"{at}.type: only function tool calls are stored, got {call.get('type')!r:.40}",
                              field=f"{at}.type", line=line)
    fn = call.get("function")
    if not isinstance(fn, Mapping):
        raise ValidationError(f"{at}.function: must be an object {{name, arguments}}", field=f"{at}.function",
                              line=line)
    extra = [k for k in call if k not in ("id", "type", "function")] + [
        f"function.{k}" for k in fn if k not in ("name", "arguments")]
    if extra:
        raise ValidationError(f"{at}: unknown key {extra[0]!r:.60}; an OpenAI tool call has id, type, "
                              "function {name, arguments}", field=f"{at}.{extra[0]}", line=line)
    return {"id": call.get("id"), "name": fn.get("name"), "arguments": fn.get("arguments")}


def messages_from(format: str, items: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Turn ``items`` in ``format`` (``openai``, ``anthropic``, ``responses``) into canonical message dicts.

    Keys that are not part of the shape (``conversation_id``, ``tenant_id``,
    ``occurred_at``, ``metadata``, ``event_id``, ...) pass through unchanged
    to every message an item produces; validation judges them.

    - ``openai``: one message per item (the flat alias is accepted too).
    - ``anthropic``: one item's blocks may become several messages, in order:
      ``text`` blocks join into ``content``, ``tool_use`` blocks become the
      assistant's ``tool_calls``, each ``tool_result`` a ``tool`` message.
      A request's top-level ``system`` is not an item: pass it as a system message.
    - ``responses``: ``message`` items map one to one; a run of consecutive
      ``function_call`` items becomes the ``tool_calls`` of the assistant
      message just before it (or of a new one), as OpenAI's chat shape holds
      them (the first item's ``event_id`` names the merged message);
      a ``function_call_output`` becomes a ``tool`` message (named after its call when the call is in ``items``).

    An item with an ``event_id`` that produces several messages gives the
    first that id and the k-th (k >= 1) ``<event_id>#<k>``: deterministic, so
    a re-run stores nothing twice. Raises :class:`ValidationError` with
    ``line`` = the item's 1-based index and ``field`` naming what is wrong.
    """
    if format not in INPUT_FORMATS:
        raise ValidationError(f"format must be one of {', '.join(INPUT_FORMATS)}, got {format!r:.40}", field="format")
    if isinstance(items, (str, bytes, Mapping)) or not isinstance(items, Sequence):
        raise ValidationError(f"messages must be a list of message objects, got {type(items).__name__}",
                              field="messages")
    out: list[dict[str, Any]] = []
    names: dict[str, str] = {}  # responses: call_id -> function name, to name the tool message answering it
    for i, item in enumerate(items):
        line = i + 1
        if not isinstance(item, Mapping):
            raise ValidationError(f"each message must be an object (a mapping), got {type(item).__name__}",
                                  field="messages", line=line)
        if format == "openai":
            out.append(canonical_openai(item, line=line))
        elif format == "anthropic":
            out.extend(_numbered(_from_anthropic(item, line), item))
        else:
            produced = _from_responses(item, line, names)
            prev = out[-1] if out else None
            if (item.get("type") == "function_call" and prev is not None and prev.get(_TAKES_CALLS)
                    and _passthrough(prev) == _passthrough(produced)):
                prev.setdefault("tool_calls", []).extend(produced["tool_calls"])
            else:
                out.append(produced)
    for m in out:
        m.pop(_TAKES_CALLS, None)
    return out


# Marks a converted Responses item that later function_call items may join: an assistant message (the model's
# text before its calls, as one response returns them) or a run of calls. Removed before messages_from returns.
_TAKES_CALLS = "_takes_calls"


def _passthrough(m: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in m.items() if k not in _CANONICAL_KEYS and k not in (_TAKES_CALLS, "event_id")}


def _numbered(messages: list[dict[str, Any]], item: Mapping[str, Any]) -> list[dict[str, Any]]:
    given = item.get("event_id")
    if isinstance(given, str) and given:
        for k, m in enumerate(messages[1:], start=1):
            m["event_id"] = f"{given}#{k}"
    return messages


def _rest(item: Mapping[str, Any], shape_keys: tuple[str, ...]) -> dict[str, Any]:
    return {k: v for k, v in item.items() if k not in shape_keys}


def _from_anthropic(item: Mapping[str, Any], line: int) -> list[dict[str, Any]]:
    rest = _rest(item, ("role", "content"))
    role, content = item.get("role"), item.get("content")
    if role not in ("user", "assistant", "system"):
        raise ValidationError(f"role: an Anthropic message is 'user' or 'assistant' (or 'system' for the system "
                              f"text), got {role!r:.40}", field="role", line=line)
    if isinstance(content, str) or content is None:
        return [{**rest, "role": role, "content": content}]
    if not isinstance(content, (list, tuple)):
        raise ValidationError("content: must be a string or a list of content blocks", field="content", line=line)
    out: list[dict[str, Any]] = []
    texts: list[str] = []
    calls: list[dict[str, Any]] = []

    def flush() -> None:
        if texts or calls:
            m: dict[str, Any] = {**rest, "role": role, "content": "\n".join(texts)}
            if calls:
                m["tool_calls"] = list(calls)
            out.append(m)
            texts.clear()
            calls.clear()

    for i, block in enumerate(content):
        at = f"content[{i}]"
        if not isinstance(block, Mapping):
            raise ValidationError(f"{at}: a content block must be an object", field=at, line=line)
        kind = block.get("type")
        if kind == "text":
            if calls:  # text after a tool_use starts a new message, so order is kept
                flush()
            texts.append(_text_parts([block], ("text",), at, line))
        elif kind == "tool_use" and role == "assistant":
            arguments = block.get("input", {})
            if not isinstance(arguments, Mapping):
                raise ValidationError(f"{at}.input: must be an object", field=f"{at}.input", line=line)
            calls.append({"id": block.get("id"), "name": block.get("name"),
                          "arguments": json.dumps(arguments, ensure_ascii=False)})
        elif kind == "tool_result" and role == "user":
            flush()
            result = block.get("content")
            if isinstance(result, (list, tuple)):
                result = _text_parts(result, ("text",), f"{at}.content", line)
            # is_error is not stored: the result's text says what failed.
            out.append({**rest, "role": "tool", "content": result, "tool_call_id": block.get("tool_use_id")})
        else:
            raise ValidationError(
                f"{at}.type: memfold stores text, tool_use (assistant) and tool_result (user) blocks; "
                f"a {kind!r:.40} block in a {role} message is not accepted", field=f"{at}.type", line=line)
    flush()
    return out


def _from_responses(item: Mapping[str, Any], line: int, names: dict[str, str]) -> dict[str, Any]:
    kind = item.get("type", "message")
    bookkeeping = ("type", "id", "status")  # the API's item id and status: not conversation content
    if kind == "message":
        rest = _rest(item, ("role", "content", *bookkeeping))
        role = item.get("role")
        role = "system" if role == "developer" else role
        content = item.get("content")
        if isinstance(content, (list, tuple)):
            types = ("output_text",) if role == "assistant" else ("input_text",)
            content = _text_parts(content, types, "content", line)
        return {**rest, "role": role, "content": content, _TAKES_CALLS: role == "assistant"}
    if kind == "function_call":
        rest = _rest(item, ("call_id", "name", "arguments", *bookkeeping))
        call_id, name = item.get("call_id"), item.get("name")
        if isinstance(call_id, str) and isinstance(name, str):
            names[call_id] = name
        return {**rest, "role": "assistant", "content": "",
                "tool_calls": [{"id": call_id, "name": name, "arguments": item.get("arguments")}], _TAKES_CALLS: True}
    if kind == "function_call_output":
        rest = _rest(item, ("call_id", "output", *bookkeeping))
        output = item.get("output")
        if isinstance(output, (list, tuple)):
            output = _text_parts(output, ("input_text",), "output", line)
        call_id = item.get("call_id")
        m = {**rest, "role": "tool", "content": output, "tool_call_id": call_id}
        if isinstance(call_id, str) and call_id in names and "name" not in m:
            m["name"] = names[call_id]
        return m
    raise ValidationError(
        f"type: memfold stores message, function_call and function_call_output items; a {kind!r:.40} item is "
        "not accepted (drop reasoning and built-in tool items before appending)", field="type", line=line)


class Shaped(msgspec.Struct, frozen=True):
    """A context in one format, ready for the model call.

    ``messages``: the ``messages`` of a chat or Anthropic call, or the
    ``input`` items of a Responses call. ``system``: Anthropic's top-level
    system text (every system message, joined by blank lines), else ``None``.
    ``memfold``: parallel to ``messages``, one annotation per entry:
    ``kind``, ``tokens``, ``index``, ``occurred_at`` (``None`` when unknown),
    ``conversation`` when given, ``name`` when the format has no place for the
    message's name. An entry made of several context messages (Anthropic
    tool results merged into one user turn; consecutive assistant tool calls
    merged for OpenAI and Anthropic) has the first one's ``kind``, ``index``
    and ``occurred_at``, the sum of ``tokens``, and ``parts``: each one's
    annotation. One context message split into several Responses items
    gives each item its annotation. ``system_memfold``: the annotations of
    the messages folded into ``system``.
    """

    format: str
    messages: list[dict[str, Any]]
    system: str | None
    memfold: list[dict[str, Any]]
    system_memfold: list[dict[str, Any]] = msgspec.field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """Return ``{"format", "messages", "memfold"}``, plus ``system`` and ``system_memfold`` for Anthropic."""
        out: dict[str, Any] = {"format": self.format, "messages": self.messages}
        if self.format == "anthropic":
            out["system"] = self.system
            out["system_memfold"] = self.system_memfold
        out["memfold"] = self.memfold
        return out


def shaped(format: str, messages: Sequence[ContextMessage], *, conversation_id: str | None = None) -> Shaped:
    """Return ``messages`` (an assembled context) in ``format``; never adds a key the format does not define.

    ``compact``: memfold's annotated dicts (``ContextMessage.as_dict``),
    ``memfold`` empty. ``openai``: ``ChatCompletionMessageParam`` dicts.
    ``anthropic``: ``MessageParam`` dicts plus ``system``. ``responses``:
    ``ResponseInputItemParam`` dicts. Raises :class:`ValidationError`
    (``field="format"``) for an unknown format.
    """
    if format not in FORMATS:
        raise ValidationError(f"format must be one of {', '.join(FORMATS)}, got {format!r:.40}", field="format")
    if format == "compact":
        return Shaped("compact", [m.as_dict() for m in messages], None, [])
    if format == "responses":
        return _to_responses(messages, conversation_id)
    if format == "anthropic":
        return _to_anthropic(messages, conversation_id)
    return _to_openai(messages, conversation_id)


def _note(m: ContextMessage, conversation_id: str | None, *, name_kept: bool) -> dict[str, Any]:
    note: dict[str, Any] = {"kind": m.kind, "tokens": m.tokens, "index": m.index,
                            "occurred_at": m.occurred_at.isoformat() if m.occurred_at else None}
    if conversation_id is not None:
        note["conversation"] = conversation_id
    if m.name and not name_kept:
        note["name"] = m.name
    return note


def _merged(notes: list[dict[str, Any]]) -> dict[str, Any]:
    if len(notes) == 1:
        return notes[0]
    return {**notes[0], "tokens": sum(n["tokens"] for n in notes), "parts": notes}


def _to_openai(messages: Sequence[ContextMessage], conversation_id: str | None) -> Shaped:
    out: list[dict[str, Any]] = []
    notes: list[list[dict[str, Any]]] = []
    for m in messages:
        msg = m.as_openai()
        note = _note(m, conversation_id, name_kept="name" in msg or not m.name)
        prev = out[-1] if out else None
        if (m.role == "assistant" and m.tool_calls and not m.content and prev is not None
                and prev["role"] == "assistant" and not _has_name_conflict(prev, msg)):
            # Tool results must follow the one assistant message that asked for them.
            prev["tool_calls"] = prev.get("tool_calls", []) + msg["tool_calls"]
            notes[-1].append(note)
            continue
        out.append(msg)
        notes.append([note])
    return Shaped("openai", out, None, [_merged(n) for n in notes])


def _has_name_conflict(prev: Mapping[str, Any], msg: Mapping[str, Any]) -> bool:
    return prev.get("name") != msg.get("name")


def _to_anthropic(messages: Sequence[ContextMessage], conversation_id: str | None) -> Shaped:
    system: list[str] = []
    system_notes: list[dict[str, Any]] = []
    out: list[dict[str, Any]] = []
    notes: list[list[dict[str, Any]]] = []
    last_kind: str | None = None  # what the previous entry was built from: "tool" or "assistant-calls"
    for m in messages:
        note = _note(m, conversation_id, name_kept=False)
        if m.role == "system":
            system.append(m.content)
            system_notes.append(note)
            continue
        if m.role == "tool":
            block = {"type": "tool_result", "tool_use_id": m.tool_call_id, "content": m.content}
            if last_kind == "tool":  # all results of one turn go in one user message
                out[-1]["content"].append(block)
                notes[-1].append(note)
            else:
                out.append({"role": "user", "content": [block]})
                notes.append([note])
            last_kind = "tool"
            continue
        if m.role == "assistant" and m.tool_calls:
            blocks: list[dict[str, Any]] = [{"type": "text", "text": m.content}] if m.content else []
            blocks += [{"type": "tool_use", "id": c.id, "name": c.name, "input": _input(c.arguments)}
                       for c in m.tool_calls]
            prev = out[-1] if out else None
            if not m.content and prev is not None and prev["role"] == "assistant" and last_kind != "tool":
                if isinstance(prev["content"], str):
                    prev["content"] = [{"type": "text", "text": prev["content"]}]
                prev["content"].extend(blocks)
                notes[-1].append(note)
            else:
                out.append({"role": "assistant", "content": blocks})
                notes.append([note])
            last_kind = "assistant-calls"
            continue
        out.append({"role": m.role, "content": m.content})
        notes.append([note])
        last_kind = m.role
    return Shaped("anthropic", out, "\n\n".join(system) if system else None, [_merged(n) for n in notes],
                  system_notes)


def _input(arguments: str) -> dict[str, Any]:
    """Return tool-call arguments as the object Anthropic's ``tool_use.input`` needs.

    Arguments that are not a JSON object (a model may emit broken JSON) are
    sent as ``{"arguments": "<the text>"}`` rather than failing the whole read.
    """
    try:
        value = json.loads(arguments or "{}")
    except ValueError:
        return {"arguments": arguments}
    return value if isinstance(value, dict) else {"arguments": arguments}


def _to_responses(messages: Sequence[ContextMessage], conversation_id: str | None) -> Shaped:
    out: list[dict[str, Any]] = []
    notes: list[dict[str, Any]] = []
    for m in messages:
        note = _note(m, conversation_id, name_kept=False)
        if m.role == "tool":
            out.append({"type": "function_call_output", "call_id": m.tool_call_id, "output": m.content})
            notes.append(note)
            continue
        if m.content or not m.tool_calls:
            out.append({"role": m.role, "content": m.content})
            notes.append(note)
        for c in m.tool_calls:
            out.append({"type": "function_call", "call_id": c.id, "name": c.name, "arguments": c.arguments})
            notes.append(note)
    return Shaped("responses", out, None, notes)
