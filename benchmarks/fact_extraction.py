"""Benchmark: the offline summarizer's fact extraction, per message, with a fingerprint of what it found.

    python benchmarks/fact_extraction.py [--messages 20000] [--chunk 100] [--beam BEAM/chats/100K [--chats 1-5]]

Reads MESSAGES generated messages (the ingest benchmark's: short turns of
support words) and, with ``--beam``, the messages of BEAM chats, in chunks of
CHUNK messages (one fact book per chunk, as a summary reads its input), each
message read once (the traces that make a second reading cheap are
forgotten first). Prints microseconds per message, the facts found, and a
fingerprint (sha256 of every chunk's facts): a change meant to make the
extractor faster must leave the fingerprint as it was. Figures, not
assertions.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from memfold.core.ports import MessageRecord
from memfold.projections import fact_extraction

sys.path.insert(0, str(Path(__file__).resolve().parent))
import beam  # noqa: E402
from ingest_and_read import messages as generated  # noqa: E402


def _records(dicts: Sequence[dict]) -> list[MessageRecord]:
    return [
        MessageRecord(tenant_id="t", conversation_id="c", index=i, seq=i + 1, event_id=f"m{i}", role=m["role"],
                      content=m["content"], tokens=0, occurred_at=m.get("occurred_at") or datetime(2024, 1, 1, tzinfo=UTC))
        for i, m in enumerate(dicts)
    ]


def measure(name: str, conversations: list[list[MessageRecord]], chunk: int) -> None:
    fact_extraction.forget_traces()
    digest = hashlib.sha256()
    facts = 0
    started = time.perf_counter()
    for records in conversations:
        for i in range(0, len(records), chunk):
            found = fact_extraction.read_all(records[i : i + chunk]).facts()
            facts += len(found)
            digest.update(repr(found).encode())
    seconds = time.perf_counter() - started
    n = sum(len(c) for c in conversations)
    print(f"{name:<12} {n:>7,} messages  {1e6 * seconds / n:8.1f} µs/message  {facts:>7,} facts  "
          f"fingerprint {digest.hexdigest()[:16]}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--messages", type=int, default=20_000)
    p.add_argument("--chunk", type=int, default=100)
    p.add_argument("--beam", help="BEAM's chats/100K folder (not shipped with memfold)")
    p.add_argument("--chats", default=None, help="which BEAM chats, e.g. 1-5 (default: all)")
    args = p.parse_args(argv)
    measure("generated", [_records(list(generated(args.messages, 100)))], args.chunk)
    if args.beam:
        chats = [_records(beam.load_chat(d).messages) for d in beam.chat_dirs(args.beam, args.chats)]
        measure("beam", chats, args.chunk)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
