"""Keep a policy's summary-request ledger: what is in flight, how far it asked, what failed or was superseded.

Shared by the summarizing policies so that they all answer the same questions
the same way: is this request new (fold it) or a copy coming back from the
log (no-op)? Is this result the answer we are waiting for, or a late answer
to a request a newer one replaced (ignore it)?

The guard against asking twice is the watermark ``requested_to``: a request
is adopted only when it covers more than every request before it, so a
request's log copy, a duplicate, or a re-decision of a failed range is a
no-op without remembering every id. The id lists are the last few only, kept
for the plan's notes and for operators.
"""

from __future__ import annotations

from memfold.core.events import SummaryRequested
from memfold.core.ports import FoldContext
from memfold.projections.policies.state_codec import FrozenState, replace

# Enough to explain the recent history in plan notes; the watermark, not these
# lists, is what makes re-deliveries no-ops, so trimming them is safe.
REMEMBERED_IDS = 16


class RequestLedger(FrozenState, kw_only=True):
    """The requests a policy has decided and what came of them. Frozen; every change returns a copy."""

    pending_id: str | None = None
    pending_covers_to: int | None = None
    # Highest covers_to of any request adopted so far (-1: none yet).
    requested_to: int = -1
    failed_ids: tuple[str, ...] = ()
    superseded_ids: tuple[str, ...] = ()
    # Why the latest answered request did not produce a usable summary
    # ("summary_failed" | "summary_empty"); None after a success.
    failure: str | None = None

    def adopt(self, request: SummaryRequested, ctx: FoldContext) -> RequestLedger:
        """Return the ledger with ``request`` in flight, or ``self`` when it is not new.

        Not new: another policy's request, one made under other settings, or
        one covering no more than a request already adopted (its own copy from
        the log, a duplicate, a stale re-delivery). A still-pending older
        request is superseded: its answer, if it ever comes, is ignored.
        """
        p = request.payload
        if p.policy != ctx.policy or p.settings_hash != ctx.settings_hash:
            return self
        if p.covers_to <= self.requested_to:
            return self
        superseded = self.superseded_ids
        if self.pending_id is not None:
            superseded = _remember(superseded, self.pending_id)
        return replace(
            self,
            pending_id=p.request_id,
            pending_covers_to=p.covers_to,
            requested_to=p.covers_to,
            superseded_ids=superseded,
        )

    def awaits(self, request_id: str) -> bool:
        """True when ``request_id`` is the request in flight (its answer is to be applied)."""
        return self.pending_id is not None and request_id == self.pending_id

    def succeeded(self) -> RequestLedger:
        """Return the ledger after the pending request produced a usable summary."""
        return replace(self, pending_id=None, pending_covers_to=None, failure=None)

    def failed(self, reason: str) -> RequestLedger:
        """Return the ledger after the pending request failed or produced an empty summary (``reason``)."""
        assert self.pending_id is not None, "failed() needs a pending request"
        return replace(
            self,
            pending_id=None,
            pending_covers_to=None,
            failed_ids=_remember(self.failed_ids, self.pending_id),
            failure=reason,
        )


def _remember(ids: tuple[str, ...], new: str) -> tuple[str, ...]:
    return (ids + (new,))[-REMEMBERED_IDS:]
