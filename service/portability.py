"""``POST /v1/admin/export``: the log as a portable archive over HTTP (the ``memfold export`` files in a tar)."""

from __future__ import annotations

import shutil
import tarfile
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import FileResponse
from starlette.background import BackgroundTask

from memfold.core.errors import ValidationError
from memfold.engine.portability import FORMATS, ExportFilter
from memfold.service.deps import Admin, services
from memfold.service.schemas import ErrorResponse

router = APIRouter(prefix="/v1", responses={401: {"model": ErrorResponse}, 403: {"model": ErrorResponse},
                                            422: {"model": ErrorResponse}})


@router.post("/admin/export", tags=["admin"], response_class=FileResponse,
             responses={200: {"content": {"application/x-tar": {}}, "description": "the export as a tar archive"}})
def export_archive(
    request: Request, key: Admin,
    format: str = Query("parquet", description="parquet or jsonl"),
    plaintext: bool = Query(False, description="unseal content (the portable form); default sealed as stored"),
    tenant: str | None = Query(None, description="only this tenant (an admin key: always its own)"),
    conversation: str | None = Query(None, description="only this conversation of the tenant"),
    since: Annotated[datetime | None, Query(description="only events that occurred at or after this time")] = None,
    until: Annotated[datetime | None, Query(description="only events that occurred before this time")] = None,
) -> FileResponse:
    """Export the log as ``memfold export`` does and return it as a tar of ``events.*`` and ``manifest.json``.

    An ``admin`` key exports its own tenant only (``tenant`` must be it or
    absent); an ``operator`` key any tenant or all. The archive is built in a
    temporary directory removed once sent.
    """
    if format not in FORMATS:
        raise ValidationError(f"format must be one of {', '.join(FORMATS)}", field="format")
    if key.role != "operator":
        if tenant not in (None, key.tenant_id):
            raise ValidationError(f"an admin key exports its own tenant ({key.tenant_id!r}) only", field="tenant")
        tenant = key.tenant_id
    if conversation is not None and tenant is None:
        tenant = "default"
    work = Path(tempfile.mkdtemp(prefix="memfold-export-"))
    try:
        services(request).engine.export(work / "export", format=format, plaintext=plaintext,
                                        only=ExportFilter(tenant, conversation, since, until))
        archive = work / "export.tar"
        with tarfile.open(archive, "w") as tar:
            for f in sorted((work / "export").iterdir()):
                tar.add(f, arcname=f.name)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return FileResponse(archive, media_type="application/x-tar", filename="memfold-export.tar",
                        background=BackgroundTask(shutil.rmtree, work, ignore_errors=True))
