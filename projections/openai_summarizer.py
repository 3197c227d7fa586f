"""The OpenAI summarizer: the official ``openai`` client against any OpenAI-compatible server.

kind "facts" → chat completions with a strict JSON schema (seed 000); kind
"text" → chat completions returning text; chunked requests with a hosted
prompt id → the Responses API with seed 001's exact input. Retries are ours
(the client's are off): a deterministic exponential schedule that honours
``Retry-After``. ``openai`` exceptions never leave this module: they become
``SummarizerError`` / ``SummarizerTimeoutError`` / ``SummarizerOutputError``.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, TypeVar

import msgspec
import openai
from pydantic import SecretStr

from memfold.core.errors import ConfigError, SummarizerError, SummarizerOutputError, SummarizerTimeoutError
from memfold.core.events import Fact
from memfold.core.ports import SummaryInput, SummaryOutput
from memfold.core.settings import SummarizerSettings
from memfold.core.tokens import DEFAULT_ENCODING, counter
from memfold.projections.fact_keys import MAX_FACTS
from memfold.projections.offline_summarizer import fit
from memfold.projections.prompts import (
    CHUNKED_INPUT_TEMPLATE,
    PROMPT_VERSION,
    Prompt,
    parse_key_facts,
    prompt_hash,
    render,
    render_chunked_input,
)

CATEGORIES = ("ENTITY", "DECISION", "CONDITION", "STATE", "NUMERIC", "GENERAL")
# A server asking us to wait longer than this is not waited for: the error carries its retry_after.
RETRY_AFTER_CEILING_S = 60.0
DEFAULT_SYSTEM = "You are a conversation summarizer."

FACTS_SCHEMA: dict[str, Any] = {
    "name": "conversation_summary",
    "strict": True,
    "schema": {
        "type": "object",
        "properties": {
            "facts": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "key": {"type": "string"},
                        "value": {"type": "string"},
                        "category": {"type": "string", "enum": list(CATEGORIES)},
                    },
                    "required": ["key", "value", "category"],
                    "additionalProperties": False,
                },
            },
            "narrative": {"type": "string"},
        },
        "required": ["facts", "narrative"],
        "additionalProperties": False,
    },
}

T = TypeVar("T")


def resolve_api_key(configured: SecretStr | str | None, base_url: str | None) -> str:
    """Return the API key: the configured one, else ``$OPENAI_API_KEY``.

    A custom ``base_url`` without a key gets a placeholder (local
    OpenAI-compatible servers rarely check keys); the public endpoint without
    one raises :class:`ConfigError`.
    """
    if isinstance(configured, SecretStr):
        configured = configured.get_secret_value()
    key = configured or os.environ.get("OPENAI_API_KEY")
    if key:
        return key
    if base_url:
        return "not-needed"
    raise ConfigError(
        "the openai summarizer/embedder needs an API key: set summarizer.api_key "
        "(MEMFOLD_SUMMARIZER__API_KEY) or OPENAI_API_KEY, or point base_url at a compatible server"
    )


def retry_after_seconds(headers: Mapping[str, str] | None) -> float | None:
    """Return the delay a response asks for (``retry-after-ms``, ``retry-after`` seconds or HTTP date), if any."""
    if not headers:
        return None
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return max(0.0, float(ms) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def backoff_delay(attempt: int, base: float, maximum: float) -> float:
    """Return the wait before retry number ``attempt + 1``: ``min(maximum, base * 2**attempt)``, no jitter."""
    return min(maximum, base * (2**attempt))


class OpenAISummarizer:
    """Summarize through an OpenAI-compatible API (name ``openai``). Thread-safe."""

    name = "openai"

    def __init__(
        self,
        settings: SummarizerSettings,
        *,
        api_key: str | None = None,
        encoding: str = DEFAULT_ENCODING,
        sleep: Callable[[float], None] = time.sleep,
    ):
        self.settings = settings
        self._sleep = sleep
        self._tokens = counter(encoding)
        self._client = openai.OpenAI(
            base_url=settings.base_url,
            api_key=api_key or resolve_api_key(settings.api_key, settings.base_url),
            timeout=settings.timeout_s,
            max_retries=0,
        )

    # ----------------------------------------------------------------- identity

    def uses_responses_api(self, request: SummaryInput) -> bool:
        """True when ``request`` goes to the Responses API with a hosted prompt (seed 001)."""
        return (
            request.prompt_format == "chunked"
            and bool(request.prompt_id)
            and self.settings.chunked_use_responses
            and request.kind == "text"
        )

    def identity(self, request: SummaryInput) -> tuple[str, str]:
        """Return (model, prompt_hash) ``request`` will be answered with, before calling the model."""
        if self.uses_responses_api(request):
            return (
                request.model or "hosted-prompt",
                prompt_hash(CHUNKED_INPUT_TEMPLATE, PROMPT_VERSION, request.prompt_id, request.prompt_version),
            )
        return request.model or self.settings.model, render(request).hash

    # ----------------------------------------------------------------- summarize

    def drop_text_caches(self) -> None:
        """Nothing to drop: this summarizer keeps no conversation text between calls."""

    def close(self) -> None:
        """Close the HTTP connections of the OpenAI client."""
        self._client.close()

    def summarize(self, request: SummaryInput) -> SummaryOutput:
        """Summarize ``request`` with the model; raise a ``SummarizerError`` subclass on any failure.

        Retries 429, 5xx, 408/409 and connection errors on the settings'
        schedule (``Retry-After`` wins when given); a timeout is not retried
        (it already spent ``timeout_s``) and raises ``SummarizerTimeoutError``.
        """
        if self.uses_responses_api(request):
            return self._responses(request)
        prompt = self._fitting(request)
        if request.kind == "facts":
            return self._facts(request, prompt)
        return self._text(request, prompt)

    def _fitting(self, request: SummaryInput) -> Prompt:
        """Render ``request``, leaving out its oldest input messages while the prompt is over ``max_input_tokens``.

        The newest input message always stays: a prompt over the limit with it
        alone raises :class:`SummarizerError` (the summary fails; the
        memory in force stays). The base summary and facts, which stand for
        what came before, are always sent.
        """
        limit = self.settings.max_input_tokens
        prompt = render(request)
        if self._tokens.count(prompt.system + prompt.user) <= limit:
            return prompt
        lo, hi = 1, len(request.messages) - 1  # messages to leave out: find the fewest that fit
        best: Prompt | None = None
        while lo <= hi:
            mid = (lo + hi) // 2
            shorter = render(msgspec.structs.replace(request, messages=request.messages[mid:]))
            if self._tokens.count(shorter.system + shorter.user) <= limit:
                best, hi = shorter, mid - 1
            else:
                lo = mid + 1
        if best is None:
            raise SummarizerError(f"the prompt is over max_input_tokens ({limit}) even with only its newest message")
        return best

    def _facts(self, request: SummaryInput, prompt: Prompt) -> SummaryOutput:
        model = request.model or self.settings.model
        messages = [{"role": "system", "content": DEFAULT_SYSTEM}, {"role": "user", "content": prompt.user}]
        completion = self._call(
            lambda: self._client.chat.completions.create(
                model=model,
                messages=messages,
                response_format={"type": "json_schema", "json_schema": FACTS_SCHEMA},
            )
        )
        content, used_model, usage = self._chat_content(completion, model)
        facts, narrative = parse_facts_answer(content)
        narrative = fit(narrative, self._tokens, request.token_cap, request.char_cap)
        tokens_in, tokens_out = self._usage(usage, "prompt_tokens", "completion_tokens", prompt.system + prompt.user, content)
        return SummaryOutput(
            text=narrative, facts=facts, model=used_model, prompt_hash=prompt.hash, tokens_in=tokens_in, tokens_out=tokens_out
        )

    def _text(self, request: SummaryInput, prompt: Prompt) -> SummaryOutput:
        model = request.model or self.settings.model
        messages = [
            {"role": "system", "content": prompt.system or DEFAULT_SYSTEM},
            {"role": "user", "content": prompt.user},
        ]
        completion = self._call(lambda: self._client.chat.completions.create(model=model, messages=messages))
        content, used_model, usage = self._chat_content(completion, model)
        text = content.strip()
        if not text:
            raise SummarizerOutputError("the model returned an empty summary")
        facts = text_facts(text, request)
        text = fit(text, self._tokens, request.token_cap, request.char_cap)
        tokens_in, tokens_out = self._usage(usage, "prompt_tokens", "completion_tokens", prompt.system + prompt.user, content)
        return SummaryOutput(
            text=text, facts=facts, model=used_model, prompt_hash=prompt.hash, tokens_in=tokens_in, tokens_out=tokens_out,
        )

    def _responses(self, request: SummaryInput) -> SummaryOutput:
        assert request.prompt_id is not None
        reference: dict[str, Any] = {"id": request.prompt_id}
        if request.prompt_version:
            reference["version"] = request.prompt_version
        text_in = render_chunked_input(request.existing_summary, request.messages)
        response = self._call(lambda: self._client.responses.create(prompt=reference, input=text_in))
        model, phash = self.identity(request)
        try:
            status = getattr(response, "status", None)
            if status not in (None, "completed"):
                raise SummarizerOutputError(f"the Responses API answered with status {status!r}, not 'completed'")
            text = response.output_text
            used_model = getattr(response, "model", None) or model
            usage = getattr(response, "usage", None)
        except SummarizerOutputError:
            raise
        except (AttributeError, TypeError, KeyError, IndexError) as exc:
            raise SummarizerOutputError(f"the Responses API answer has an unexpected shape: {exc}") from exc
        if not isinstance(text, str) or not text.strip():
            raise SummarizerOutputError("the Responses API returned no output_text")
        facts = text_facts(text.strip(), request)
        out = fit(text.strip(), self._tokens, request.token_cap, request.char_cap)
        tokens_in, tokens_out = self._usage(usage, "input_tokens", "output_tokens", text_in, text)
        return SummaryOutput(
            text=out, facts=facts, model=str(used_model), prompt_hash=phash, tokens_in=tokens_in, tokens_out=tokens_out,
        )

    # ----------------------------------------------------------------- plumbing

    def _chat_content(self, completion: Any, model: str) -> tuple[str, str, Any]:
        try:
            choice = completion.choices[0]
            message = choice.message
            refusal = getattr(message, "refusal", None)
            finish = getattr(choice, "finish_reason", None)
            content = message.content
            used_model = getattr(completion, "model", None) or model
            usage = getattr(completion, "usage", None)
        except (AttributeError, TypeError, KeyError, IndexError) as exc:
            raise SummarizerOutputError(f"the chat completion has an unexpected shape: {exc}") from exc
        if refusal:
            raise SummarizerOutputError(f"the model refused: {refusal}")
        if finish == "length":
            raise SummarizerOutputError("the model's answer was cut at its length limit")
        if not isinstance(content, str) or not content.strip():
            raise SummarizerOutputError("the model returned an empty answer")
        return content, str(used_model), usage

    def _usage(self, usage: Any, in_name: str, out_name: str, sent: str, received: str) -> tuple[int, int]:
        tokens_in = getattr(usage, in_name, None) if usage is not None else None
        tokens_out = getattr(usage, out_name, None) if usage is not None else None
        if not isinstance(tokens_in, int):
            tokens_in = self._tokens.count(sent)
        if not isinstance(tokens_out, int):
            tokens_out = self._tokens.count(received)
        return tokens_in, tokens_out

    def _call(self, fn: Callable[[], T]) -> T:
        """Call ``fn`` with retries; translate every ``openai`` exception (see :meth:`summarize`)."""
        return call_with_retries(
            fn,
            max_retries=self.settings.max_retries,
            base=self.settings.backoff_base_s,
            maximum=self.settings.backoff_max_s,
            sleep=self._sleep,
            where=self.settings.base_url or "the OpenAI API",
            timeout=self.settings.timeout_s,
        )


def call_with_retries(
    fn: Callable[[], T],
    *,
    max_retries: int,
    base: float,
    maximum: float,
    sleep: Callable[[float], None],
    where: str,
    timeout: float,
    error: type[Exception] = SummarizerError,
    timeout_error: type[Exception] = SummarizerTimeoutError,
    output_error: type[Exception] = SummarizerOutputError,
) -> T:
    """Call ``fn``; retry 429/5xx/408/409/connection errors up to ``max_retries`` times; translate openai errors.

    The wait before retry ``n`` is ``Retry-After`` when the server sent one
    (up to :data:`RETRY_AFTER_CEILING_S`; beyond that give up at once), else
    ``min(maximum, base * 2**(n-1))``. The raised error carries ``retry_after``.
    """
    attempt = 0
    while True:
        retry_after: float | None = None
        try:
            return fn()
        except openai.APITimeoutError as exc:
            raise timeout_error(
                f"{where} did not answer within {timeout:g}s; raise the timeout or check the server"
            ) from exc
        except openai.APIConnectionError as exc:
            reason = f"cannot reach {where}: {exc.__cause__ or exc}"
            last: Exception = exc
        except openai.APIStatusError as exc:
            status = exc.status_code
            detail = _error_detail(exc)
            if status == 429 or status >= 500 or status in (408, 409):
                retry_after = retry_after_seconds(exc.response.headers)
                reason = f"{where} answered HTTP {status} ({detail})"
                last = exc
            else:
                raise error(f"{where} rejected the request with HTTP {status}: {detail}; fix the request or settings") from exc
        except openai.APIResponseValidationError as exc:
            raise output_error(f"{where} answered with data that does not match the API schema: {exc}") from exc
        except openai.OpenAIError as exc:
            raise error(f"the openai client failed: {type(exc).__name__}: {exc}") from exc
        too_long = retry_after is not None and retry_after > RETRY_AFTER_CEILING_S
        if attempt >= max_retries or too_long:
            tried = f"after {attempt + 1} attempt{'s' if attempt else ''}"
            err = error(f"{reason} {tried}; retry later" + (f" (server asks for {retry_after:g}s)" if retry_after else ""))
            err.retry_after = retry_after  # type: ignore[attr-defined]
            raise err from last
        sleep(retry_after if retry_after is not None else backoff_delay(attempt, base, maximum))
        attempt += 1


def _error_detail(exc: openai.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict):
        inner = body.get("error")
        message = inner.get("message") if isinstance(inner, dict) else body.get("message")
        if message:
            return str(message)
    return exc.message


def parse_facts_answer(content: str) -> tuple[tuple[Fact, ...], str]:
    """Return (facts, narrative) from a model's JSON answer; raise ``SummarizerOutputError`` saying what is wrong.

    Scalar values are turned into strings and an unknown category becomes
    GENERAL (lenient servers ignore ``strict``); a missing or mistyped
    ``facts``/``narrative``, or nothing at all, is an error. A key given twice
    keeps its first position and its last value.
    """
    try:
        data = json.loads(content)
    except json.JSONDecodeError as exc:
        raise SummarizerOutputError(f"the model's answer is not JSON ({exc.msg} at character {exc.pos})") from exc
    if not isinstance(data, dict):
        raise SummarizerOutputError(f"the model's answer is a JSON {type(data).__name__}, not an object with facts and narrative")
    raw_facts, narrative = data.get("facts"), data.get("narrative")
    if not isinstance(raw_facts, list):
        raise SummarizerOutputError("the model's answer has no 'facts' list")
    if not isinstance(narrative, str):
        raise SummarizerOutputError("the model's answer has no 'narrative' string")
    facts: dict[str, Fact] = {}
    for i, item in enumerate(raw_facts):
        if not isinstance(item, dict):
            raise SummarizerOutputError(f"facts[{i}] is not an object")
        key, value, category = item.get("key"), item.get("value"), item.get("category", "GENERAL")
        if not isinstance(key, str) or not key.strip():
            raise SummarizerOutputError(f"facts[{i}] has no 'key' string")
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise SummarizerOutputError(f"facts[{i}] ({key}) has no scalar 'value'")
        category = str(category).upper() if isinstance(category, str) else "GENERAL"
        facts[key.strip()] = Fact(key=key.strip(), value=str(value), category=category if category in CATEGORIES else "GENERAL")
    if not facts and not narrative.strip():
        raise SummarizerOutputError("the model returned no facts and an empty narrative")
    return tuple(facts.values()), narrative.strip()


# --------------------------------------------------------------------------- facts of a text summary

def text_facts(text: str, request: SummaryInput) -> tuple[Fact, ...]:
    """Return the structured facts of a model's text summary for ``request`` (see :func:`parse_key_facts`).

    A sliding window that keeps its facts (``keep_facts``) carries them as
    the offline summarizer does: the request's ``existing_facts`` stay
    unless the answer lists a key again, a changed value supersedes the old
    one (kept, marked ``superseded_by``), and a fact the model dropped from
    its text is still returned, so the next version gets it back. At most
    ``MAX_FACTS`` keys (the most recently listed win). A value stated
    before keeps when and where it was first stated.
    """
    parsed = parse_key_facts(text, {m.index: m.occurred_at for m in request.messages})
    if not request.keep_facts:
        return tuple(parsed)
    history: dict[str, list[Fact]] = {}
    current: dict[str, Fact] = {}
    for f in request.existing_facts:
        if f.current:
            current[f.key] = f
        else:
            history.setdefault(f.key, []).append(f)
    for f in parsed:
        old = current.pop(f.key, None)
        if old is not None and old.value == f.value:
            f = old
        elif old is not None:
            history.setdefault(f.key, []).append(old.model_copy(update={"superseded_by": f.value}))
        current[f.key] = f
    keys = list(current)[-MAX_FACTS:]
    return tuple(x for k in keys for x in (*history.get(k, ()), current[k]))
