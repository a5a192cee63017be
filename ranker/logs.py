"""The HTTP API's logs: one line per request with its request id and tenant id, in the format
of :mod:`storage.logs`. The request id is the caller's ``X-Request-ID`` (when it is a short
printable token) or a new one, and is returned in the response's ``X-Request-ID``.
"""

from __future__ import annotations

import logging
import re
import time
import uuid

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ranker.problems import problem_body
from storage.logs import request_context

_REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
access_log = logging.getLogger("mnemostream.http")
log = logging.getLogger(__name__)


def set_tenant(tenant_id: str) -> None:
    """Record the tenant of the request being served (the API key's, once authenticated)."""
    current = request_context.get()
    if current is not None:
        current["tenant_id"] = tenant_id


class RequestLog:
    """ASGI middleware: a request id per request, echoed as ``X-Request-ID``, and one log line
    when the response starts (method, route template, status, duration; ids in the path, a user's
    or a memory's, are not logged): for every request, or with
    ``every_request`` off only for those answered 4xx or 5xx. An exception no handler answered
    is logged here, with the request's ids, and answered 500 (a problem naming its type only);
    Starlette's own last handler sits outside this middleware, so that answer had no request id,
    no log line, and its traceback no ids.
    """

    def __init__(self, app: ASGIApp, *, every_request: bool = True) -> None:
        self.app = app
        self.every_request = every_request

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = dict(scope.get("headers", [])).get(b"x-request-id", b"").decode("latin-1")
        request_id = given if _REQUEST_ID.fullmatch(given) else uuid.uuid4().hex
        token = request_context.set({"request_id": request_id, "tenant_id": None})
        started = time.perf_counter()
        responded = False

        async def tagged(message: Message) -> None:
            nonlocal responded
            if message["type"] == "http.response.start":
                responded = True
                message["headers"] = [
                    *message.get("headers", []),
                    (b"x-request-id", request_id.encode()),
                ]
                if self.every_request or message["status"] >= 400:
                    _log_line(scope, message["status"], started)
            await send(message)

        try:
            await self.app(scope, receive, tagged)
        except Exception as exc:
            if responded:  # a stream cut short: nothing more can be said to the client
                raise
            log.error("internal error: %s: %s", type(exc).__name__, exc, exc_info=exc)
            body, headers = problem_body(500, f"internal error: {type(exc).__name__}")
            await tagged(
                {
                    "type": "http.response.start",
                    "status": 500,
                    "headers": [
                        *((k.encode(), v.encode()) for k, v in headers.items()),
                        (b"content-length", str(len(body)).encode()),
                    ],
                }
            )
            await tagged({"type": "http.response.body", "body": body})
        finally:
            request_context.reset(token)


ROUTE_KEY = "mnemostream.route"
"""The scope key of the path template of the route serving a request (set by the admission
middleware; ``other`` for none)."""


def _log_line(scope: Scope, status: int, started: float) -> None:
    route = scope.get(ROUTE_KEY)
    if not route or route == "other":
        # the path of no route, escaped: a %0A in it would write a line of the caller's making
        route = str(scope.get("path", "")).encode("unicode_escape").decode("ascii")
    access_log.info(
        "%s %s %d",
        scope.get("method"),
        route,
        status,
        extra={
            "method": scope.get("method"),
            "route": route,
            "status": status,
            "duration_ms": round((time.perf_counter() - started) * 1000, 3),
        },
    )
