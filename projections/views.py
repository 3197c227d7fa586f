"""Documented SQL views over the projection: the memory observability queries of the sliding-window spec.

Each view covers every policy (filter on ``policy``); ``memfold sql --views``
lists them with their description. They are plain views, evaluated at query
time: the stuck-request view compares with the current time, which is fine
in a read and never happens inside a fold.
"""

from __future__ import annotations

import msgspec


class View(msgspec.Struct, frozen=True):
    name: str
    doc: str
    sql: str


VIEWS: tuple[View, ...] = (
    View(
        "memory_version_chain",
        "Every summary version with the end of the version it was based on (base_end_seq); "
        "ORDER BY covers_to DESC for the newest first.",
        """SELECT s.policy, s.tenant_id, s.conversation_id, s.summary_id, s.request_id, s.status,
                  s.window_start, s.covers_from, s.covers_to, s.base_summary_id, b.covers_to AS base_end_seq,
                  s.settings_hash, s.model, s.latency_ms AS generation_time_ms, s.requested_at
           FROM summaries s LEFT JOIN summaries b ON s.base_summary_id = b.summary_id""",
    ),
    View(
        "memory_stuck_processing",
        "Summary requests still 'processing' more than 5 minutes after they were requested, with their age.",
        """SELECT policy, tenant_id, conversation_id, request_id, requested_at, now() - requested_at AS age
           FROM summaries
           WHERE status = 'processing' AND requested_at < now() - INTERVAL 5 MINUTE""",
    ),
    View(
        "memory_window_progression",
        "Completed summaries with their window (start, end, size) and generation time, newest first.",
        """SELECT policy, tenant_id, conversation_id, coalesce(window_start, covers_from) AS start_sequence,
                  covers_to AS end_sequence, covers_to - coalesce(window_start, covers_from) + 1 AS window_size,
                  latency_ms AS generation_time_ms, requested_at
           FROM summaries WHERE status = 'completed' AND coalesce(scope, 'conversation') = 'conversation'
           ORDER BY requested_at DESC, resolved_seq DESC""",
    ),
    View(
        "memory_generation_time",
        "Average and maximum summarizer time (ms) and the number of completed summaries, per policy.",
        """SELECT policy, avg(latency_ms) AS avg_ms, max(latency_ms) AS max_ms, count(*) AS total_summaries
           FROM summaries WHERE status = 'completed' AND latency_ms IS NOT NULL
           GROUP BY policy""",
    ),
)



def view_ddl() -> list[str]:
    """Return the ``CREATE OR REPLACE VIEW`` statements of every view."""
    return [f"CREATE OR REPLACE VIEW {v.name} AS {v.sql}" for v in VIEWS]
