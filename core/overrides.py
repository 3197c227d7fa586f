"""Policy-setting overrides for replays and promotions: parse ``key=value``, read a settings file, apply.

A replay changes what decides the folds, nothing else: ``policy``,
``policies``, ``tenant_policies`` and the knobs of each policy table
(``hierarchical.trigger_message_count=30``). Keys are dotted; values are
JSON when they parse as JSON, else plain strings. Applying validates every
knob with its policy's settings model, so a bad value is a
:class:`ValidationError` naming the key, before anything is folded.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pydantic

from memfold.core.errors import InputFileError, ValidationError
from memfold.core.ids import content_hash
from memfold.core.settings import POLICY_NAMES, POLICY_SETTINGS, Settings

TOP_KEYS = ("policy", "policies", "tenant_policies")


def parse_assignments(items: Sequence[str]) -> dict[str, Any]:
    """Return ``{"a.b": value}`` for ``["a.b=value", ...]``; a value is JSON if it parses, else text."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ValidationError(f"--set takes KEY=VALUE (e.g. hierarchical.trigger_message_count=30), got {item!r}",
                                  field="set")
        try:
            out[key] = json.loads(raw)
        except ValueError:
            out[key] = raw
    return out


def load_file(path: str | Path) -> tuple[dict[str, Any], list[str]]:
    """Return the policy settings of a memfold.toml-style file as dotted keys, and the keys it ignored.

    Only what a replay may change is taken (``policy``, ``policies``,
    ``tenant_policies``, the policy tables); anything else (summarizer,
    log...) is listed as ignored, so a whole memfold.toml can be passed.
    """
    p = Path(path)
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InputFileError(f"cannot read settings file {p}: {exc.strerror or exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ValidationError(f"settings file {p} is not valid TOML: {exc}", field="settings") from exc
    out: dict[str, Any] = {}
    ignored: list[str] = []
    for key, value in data.items():
        if key in TOP_KEYS:
            out[key] = value
        elif key in POLICY_NAMES and isinstance(value, Mapping):
            out.update({f"{key}.{knob}": v for knob, v in value.items()})
        else:
            ignored.append(key)
    return out, ignored


def apply(settings: Settings, overrides: Mapping[str, Any]) -> Settings:
    """Return ``settings`` with ``overrides`` (dotted keys) applied and validated.

    Every policy ``settings`` folds stays folded (``policies`` only adds),
    as the live projection keeps every policy it holds. Raises
    :class:`ValidationError` naming the first bad key or value.
    """
    update: dict[str, Any] = {}
    knobs: dict[str, dict[str, Any]] = {}
    for key, value in overrides.items():
        head, dot, knob = key.partition(".")
        if not dot and head in TOP_KEYS:
            update[head] = value
        elif dot and head in POLICY_SETTINGS and knob and "." not in knob:
            knobs.setdefault(head, {})[knob] = value
        else:
            raise ValidationError(
                f"cannot override {key!r}: a replay changes policy, policies, tenant_policies or a policy knob "
                f"such as hierarchical.trigger_message_count", field=key)
    if "policies" in update:
        value = update["policies"]
        names = [n.strip() for n in value.split(",")] if isinstance(value, str) else list(value)
        update["policies"] = tuple(dict.fromkeys([*settings.active_policies, *(n for n in names if n)]))
    if "tenant_policies" in update and not isinstance(update["tenant_policies"], Mapping):
        raise ValidationError("tenant_policies takes a table {tenant = policy}", field="tenant_policies")
    for name in (update.get("policy"), *update.get("policies", ()), *dict(update.get("tenant_policies", {})).values()):
        if name is not None and name not in POLICY_SETTINGS:
            raise ValidationError(f"unknown policy {name!r}; choose from {', '.join(POLICY_NAMES)}", field="policy")
    for policy, values in knobs.items():
        model = POLICY_SETTINGS[policy]
        try:
            update[policy] = model.model_validate({**getattr(settings, policy).model_dump(), **values})
        except pydantic.ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first.get("loc", ()))
            raise ValidationError(f"{policy}.{where}: {first.get('msg')}", field=f"{policy}.{where}") from None
    out = settings.model_copy(update=update)
    # The read policy and per-tenant picks are folded too, like the live projection does.
    out = out.model_copy(update={"policies": tuple(dict.fromkeys([*settings.active_policies, *out.active_policies]))})
    idle = [p for p in knobs if p not in out.active_policies]
    if idle:
        raise ValidationError(
            f"{idle[0]} is not folded here (folded: {', '.join(out.active_policies)}); its settings would change "
            f"nothing: add it with policy={idle[0]} or policies={idle[0]}", field=idle[0])
    return out


def policy_view(settings: Settings) -> dict[str, Any]:
    """Return what decides the folds of ``settings`` as dotted keys (round-trips through :func:`apply`)."""
    out: dict[str, Any] = {"policy": settings.policy, "policies": list(settings.active_policies),
                           "tenant_policies": dict(settings.tenant_policies)}
    for name in settings.active_policies:
        out.update({f"{name}.{k}": v for k, v in settings.policy_settings(name).model_dump(mode="json").items()})
    return out


def hashes(settings: Settings) -> dict[str, str]:
    """Return ``{policy: settings_hash}`` of every policy ``settings`` folds."""
    return {name: settings.settings_hash(name) for name in settings.active_policies}


def combined_hash(settings: Settings) -> str:
    """Return one short hash of every folded policy's settings and the read policy (names a replay's settings)."""
    return content_hash(settings.policy, sorted(hashes(settings).items()), length=12)
