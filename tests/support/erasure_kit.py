"""Plant markers in every field a message and a tool call can carry, and search every byte for them.

Also a child process for the crash tests::

    python tests/support/erasure_kit.py forget DATA_DIR SETTINGS_JSON CONVERSATION
    python tests/support/erasure_kit.py forget-user DATA_DIR SETTINGS_JSON USER

prints ``opened`` once the engine is open, then forgets the conversation
(or the user) and exits 0 (1 with the error on stderr when it did not finish).
"""

from __future__ import annotations

import gc
import json
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

ALL_POLICIES = ("hierarchical", "chunked", "sliding_window", "rolling", "topics")
# Low triggers: every policy summarizes (and topics titles and compacts) within the planted turns.
SETTINGS: dict[str, Any] = {
    "policy": "hierarchical",
    "policies": ALL_POLICIES,
    "hierarchical": {"trigger_message_count": 6, "recent_message_count": 2, "resummarize_every": 2},
    "chunked": {"chunk_summarize_threshold": 200, "prompt_token_budget": 180, "summary_token_cap": 60},
    "sliding_window": {"rolling_window_size": 6, "summarize_after_seq": 3},
    "rolling": {"message_threshold": 6, "recent_messages_to_keep": 2, "regeneration_threshold": 3},
    "topics": {"max_messages_per_topic": 6, "recent_message_keep": 2},
}
# The tool message's tool_call_id is the assistant's tool-call id (callid), as it must be.
FIELDS = ("content", "name", "variant", "metakey", "metaval", "callid", "callname", "callargs", "reason", "ingested")


def markers(tag: str) -> dict[str, str]:
    """Return one distinct marker per field: ``zq<field><tag><random>``, found nowhere by chance."""
    return {f: f"zq{f}{tag}{uuid.uuid4().hex[:10]}" for f in FIELDS}


def plant(engine: Any, conversation: str, m: dict[str, str], turns: int = 8) -> str:
    """Append ``turns`` rounds (user, a tool call, its result, a reply) carrying the markers; retract one user turn.

    Each user message opens with the content marker, so the topics policy
    titles its topics with it. Returns the event id of the retracted message.
    """
    retracted = None
    for i in range(turns):
        user = engine.append_message(
            conversation, "user", f"{m['content']} order #{4100 + i} for Dana is late, turn {i}", name=m["name"],
            model_variant=m["variant"], metadata={m["metakey"]: {"note": m["metaval"]}}, importance=0.75,
        )
        call_id = f"{m['callid']}-{i}"
        engine.append_message(
            conversation, "assistant", f"Checking order #{4100 + i} ({m['content']})",
            tool_calls=[{"id": call_id, "name": m["callname"], "arguments": json.dumps({"email": m["callargs"]})}],
        )
        engine.append_message(conversation, "tool", f'{{"order": "{m["content"]}", "status": "late"}}',
                              tool_call_id=call_id, name=m["callname"])
        engine.append_message(conversation, "assistant", f"Order #{4100 + i} is late; I have asked the courier.")
        if i == 2:
            retracted = _event_id(engine, conversation, user)
    engine.retract(conversation, retracted, reason=m["reason"])
    return retracted


def _event_id(engine: Any, conversation: str, position: Any) -> str:
    engine.wait_for(position)
    return engine.history(conversation)[-1].event_id


def ingest_line(conversation: str, m: dict[str, str]) -> bytes:
    """A JSONL line whose content is the ingest marker (a PIN-like secret: ids must not be an oracle for it)."""
    return json.dumps({"conversation_id": conversation, "role": "user",
                       "content": f"my card PIN is 4831 {m['ingested']}"}).encode() + b"\n"


def files_with(roots: list[Path], needles: dict[str, str]) -> dict[str, list[str]]:
    """Return ``{file: [field, ...]}`` for every file under ``roots`` whose bytes hold a marker (any case)."""
    hits: dict[str, list[str]] = {}
    forms = {f: {n.encode(), n.upper().encode(), n.title().encode()} for f, n in needles.items()}
    for root in roots:
        for path in root.rglob("*"):
            if not path.is_file():
                continue
            try:
                data = path.read_bytes()
            except OSError:  # a file removed while walking (a broker segment rolled)
                continue
            found = [f for f, variants in forms.items() if any(v in data for v in variants)]
            if found:
                hits[str(path)] = found
    return hits


def strings_with(needles: dict[str, bytes]) -> dict[str, list[str]]:
    """Return ``{field: [string, ...]}`` for every string object this process can reach that holds a marker (any
    case), each shown with the marker replaced by ``<field>`` (so the answer holds no copy of it). ``needles``
    are bytes, so the test's own copy is not found either.

    Walks from every object the garbage collector tracks, through the containers
    it does not track (tuples and sets of strings), so a cache keyed by text is seen.
    """
    forms = {f: (n.lower(), n.upper(), n.title()) for f, n in needles.items()}
    gc.collect()
    hits: dict[str, list[str]] = {}
    seen: set[int] = set()
    todo = list(gc.get_objects())
    while todo:
        obj = todo.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, str):
            data = obj.encode("utf-8", "surrogatepass")
            found = [field for field, variants in forms.items() if any(v in data for v in variants)]
            if found:
                for field, variants in forms.items():  # every marker replaced: the answer holds none of them
                    for v in variants:
                        data = data.replace(v, f"<{field}>".encode())
                shown = data[:100].decode("utf-8", "replace")
                for field in found:
                    hits.setdefault(field, []).append(shown)
        elif isinstance(obj, (tuple, frozenset)) or gc.is_tracked(obj):
            todo.extend(gc.get_referents(obj))
    return hits


def _child(command: str, data: str, settings_file: str, name: str) -> int:
    """Open the engine, print ``opened``, then forget conversation ``name`` (``forget``) or user ``name``."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from memfold.core.errors import MemfoldError
    from memfold.core.settings import Settings
    from memfold.engine.engine import MemoryEngine

    overrides = json.loads(Path(settings_file).read_text())
    with MemoryEngine(Settings.load(None, data_dir=Path(data), **overrides)) as engine:
        print("opened", flush=True)
        try:
            engine.forget(name) if command == "forget" else engine.forget_user(name)
        except MemfoldError as exc:
            print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
            return 1
    return 0


def run_child(command: str, data: Path, settings_file: Path, name: str, *,
              kill_after: float | None = None) -> subprocess.CompletedProcess | None:
    """Run this kit's ``command`` child to its end; with ``kill_after``, SIGKILL it that long after it opened."""
    cmd = [sys.executable, __file__, command, str(data), str(settings_file), name]
    if kill_after is None:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    child = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "opened"
    time.sleep(kill_after)
    child.kill()
    child.communicate(timeout=60)
    return None


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] in ("forget", "forget-user"):
        sys.exit(_child(*sys.argv[1:]))
    print(__doc__, file=sys.stderr)
    sys.exit(2)
