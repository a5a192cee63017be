"""One error body for the whole API: problem details (RFC 9457), ``application/problem+json``.

``{"type": "about:blank", "title": "Unprocessable Content", "status": 422, "detail":
"memories[0].tags[2]=...: <reason>", "field": "memories[0].tags[2]"}``: ``title`` is the status's
phrase, ``detail`` says what went wrong for this request, ``field`` (a 422, and a write's 409 for
a memory of another scope) is the path of the field at fault. A 429 or 503 also carries
``Retry-After`` (seconds) and ``retry_after_s``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from http import HTTPStatus
from typing import Any

import orjson
from fastapi.responses import Response
from pydantic import BaseModel, Field

MEDIA_TYPE = "application/problem+json"


class Problem(BaseModel):
    """The body of every error response."""

    type: str = Field("about:blank", description="no problem types beyond the status")
    title: str = Field(description="the HTTP status phrase", examples=["Unprocessable Content"])
    status: int = Field(description="the HTTP status", examples=[422])
    detail: str = Field(
        description="what went wrong: for a 422, ``<field>=<value>: <reason>``",
        examples=["memories[0].importance=1.5: Input should be less than or equal to 1"],
    )
    field: str | None = Field(
        None,
        description="a 422, and a write's 409 (another scope): the path of the field at fault",
        examples=["memories[0]"],
    )
    retry_after_s: int | None = Field(
        None, description="429 and 503 only: seconds to wait before the same request (Retry-After)"
    )


MAX_RETRY_AFTER_S = 86_400
"""The longest ``Retry-After`` a problem names (seconds)."""


def problem_body(
    status: int, detail: str, *, field: str | None = None, retry_after_s: float | None = None
) -> tuple[bytes, dict[str, str]]:
    """The JSON body and the headers (content type, Retry-After) of one problem response."""
    body: dict[str, Any] = {
        "type": "about:blank",
        "title": HTTPStatus(status).phrase,
        "status": status,
        "detail": printable(detail),
    }
    headers = {"content-type": MEDIA_TYPE}
    if field is not None:
        body["field"] = printable(field)
    if retry_after_s is not None:
        # at most a day: a tiny tenant rate's wait (1e30 s) would not fit JSON's integers
        in_bounds = retry_after_s < MAX_RETRY_AFTER_S  # False for NaN too
        retry = max(1, math.ceil(retry_after_s)) if in_bounds else MAX_RETRY_AFTER_S
        body["retry_after_s"] = retry
        headers["retry-after"] = str(retry)
    return orjson.dumps(body), headers


def problem(
    status: int,
    detail: str,
    *,
    field: str | None = None,
    retry_after_s: float | None = None,
    headers: Mapping[str, str] | None = None,
) -> Response:
    """A problem response; ``headers`` adds to the body's (e.g. ``WWW-Authenticate``)."""
    content, own = problem_body(status, detail, field=field, retry_after_s=retry_after_s)
    return Response(content, status, {**own, **(headers or {})}, media_type=MEDIA_TYPE)


def printable(text: str) -> str:
    """``text`` with what UTF-8 cannot carry (a lone surrogate) escaped."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _described(description: str) -> dict[str, Any]:
    return {
        "model": Problem,
        "description": description,
        "content": {MEDIA_TYPE: {"schema": {"$ref": "#/components/schemas/Problem"}}},
    }


RESPONSES: dict[int | str, dict[str, Any]] = {
    400: _described("the body is not JSON (or not UTF-8)"),
    401: _described("no API key, or one this service does not know"),
    408: _described("the request's body did not all arrive within MNEMO_BODY_TIMEOUT_S"),
    413: _described("the request's body is over MNEMO_MAX_BODY_BYTES: send less at once"),
    422: _described("a field is invalid: ``field`` names it; nothing was written"),
    429: _described(
        "too many requests in flight (of all tenants, or of this tenant), too many request body"
        " bytes in flight (MNEMO_MAX_BODY_BYTES_IN_FLIGHT; a body of at most 64 KiB is never"
        " refused for it), or the tenant is over its request rate: retry after ``Retry-After``"
        " seconds"
    ),
    500: _described("an internal error (a bug): the request may be retried"),
    503: _described(
        "Kafka or Milvus cannot answer now, or a read-your-writes token was not applied in"
        " time: retry after ``Retry-After`` seconds"
    ),
}
"""The errors every API route can answer, for the OpenAPI document."""

NOT_FOUND: dict[int | str, dict[str, Any]] = {404: _described("this tenant has no such memory")}
CONFLICT: dict[int | str, dict[str, Any]] = {409: _described("the memory is deleted or superseded")}
OTHER_SCOPE: dict[int | str, dict[str, Any]] = {
    409: _described(
        "a memory's id is of a memory of another scope (``user_id``, ``agent_id`` or"
        " ``session_id``; ``field`` names the write's)"
    )
}
ADMIN: dict[int | str, dict[str, Any]] = {
    403: _described("admin routes are disabled: the server has no MNEMO_ADMIN_KEY"),
    404: _described("no such tenant (or key)"),
}
"""What an admin route answers besides :data:`RESPONSES` (401 there: no or a wrong admin key)."""
REUSED: dict[int | str, dict[str, Any]] = {
    409: _described("the id is of a tenant deleted with its memories kept (say reuse)")
}
