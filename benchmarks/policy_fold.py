"""Benchmark: the cost of the pure policy fold per message, and of persisting a policy state.

    python benchmarks/policy_fold.py [--messages 4000] [--repeat 3] [--policies a,b]

For each policy, folds MESSAGES alternating user/assistant messages of one
conversation through ``projections.fold.step`` (evolve + decide, as the
projector does), answering every summary request at once with a fixed text
(no summarizer: the figure is the fold alone), and prints the best of REPEAT
runs in microseconds per message. Then the microseconds to encode the final
state to the JSON the projector stores in ``policy_state`` and to decode it
back. Figures, not assertions.
"""

from __future__ import annotations

import argparse
import time
from datetime import UTC, datetime, timedelta

from memfold.core.ports import MessageRecord
from memfold.core.settings import POLICY_NAMES, Settings
from memfold.core.tokens import counter
from memfold.engine.builders import fold_contexts
from memfold.projections import fold
from memfold.projections.policies import state_codec

T0 = datetime(2026, 1, 1, tzinfo=UTC)
WORDS = "order refund invoice delivery address payment warranty account password shipping tracking label".split()


def _messages(n: int) -> list[MessageRecord]:
    count = counter()
    out = []
    for i in range(n):
        text = f"message {i}: " + " ".join(WORDS[(i + k) % len(WORDS)] for k in range(12 + i % 7))
        out.append(MessageRecord(
            tenant_id="t", conversation_id="c", index=i, seq=i + 1, event_id=f"m{i}",
            role="user" if i % 2 == 0 else "assistant", content=text, tokens=count.count_message(text),
            occurred_at=T0 + timedelta(seconds=30 * i),
        ))
    return out


def _fold(policy, ctx, items) -> tuple[object, int]:
    state, events = policy.initial("t", "c"), 0
    for item in items:
        state, decided = fold.step(policy, state, item, ctx)
        for request in decided:
            events += 1
            if request.type == "SummaryRequested":
                reply = fold.produced(request, text=f"summary up to {request.payload.covers_to}",
                                      summarizer="bench", model="bench", prompt_hash="bench")
                state, _ = fold.step(policy, state, reply, ctx)
    return state, events


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=4000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--policies", default=",".join(POLICY_NAMES), help="comma-separated (default: all five)")
    args = parser.parse_args()
    items = _messages(args.messages)
    contexts = fold_contexts(Settings.load(None, policies=tuple(args.policies.split(","))))
    print(f"{'policy':<16}{'fold us/msg':>12}{'derived':>9}{'encode us':>11}{'decode us':>11}{'state bytes':>13}")
    for name, (policy, ctx) in contexts.items():
        best = float("inf")
        for _ in range(args.repeat):
            started = time.perf_counter()
            state, events = _fold(policy, ctx, items)
            best = min(best, time.perf_counter() - started)
        raw = state_codec.encode(state)
        n = 2000
        started = time.perf_counter()
        for _ in range(n):
            state_codec.encode(state)
        encode = (time.perf_counter() - started) / n
        started = time.perf_counter()
        for _ in range(n):
            state_codec.decode(type(state), raw)
        decode = (time.perf_counter() - started) / n
        print(f"{name:<16}{best / len(items) * 1e6:>12.1f}{events:>9}{encode * 1e6:>11.1f}{decode * 1e6:>11.1f}"
              f"{len(raw):>13}")


if __name__ == "__main__":
    main()
