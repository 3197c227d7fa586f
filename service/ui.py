"""GET /ui: one self-contained page (no external assets) showing how a conversation's memory evolved.

The page itself needs no key; it asks for one and calls the /v1 API with it,
so it shows exactly what that key's tenant and role may read.
"""

from __future__ import annotations

from importlib import resources

from fastapi import APIRouter
from fastapi.responses import HTMLResponse

router = APIRouter()


@router.get("/ui", response_class=HTMLResponse, tags=["ui"], include_in_schema=False)
def page() -> HTMLResponse:
    """Return the memory-evolution page: conversations, summary versions, facts, context."""
    html = resources.files("memfold.service").joinpath("static/ui.html").read_text(encoding="utf-8")
    return HTMLResponse(html, headers={"Content-Security-Policy": "default-src 'self'; style-src 'unsafe-inline'; "
                                                                  "script-src 'unsafe-inline'"})
