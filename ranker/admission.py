"""Admission control at the edge, and the HTTP status counter.

An ASGI middleware in front of the whole app: a request to the API (``/v1/...``) beyond
``max_in_flight`` being served is answered 429 with ``Retry-After`` at once, before its body is
read, embedded or searched, so overload costs microseconds and memory stays bounded. Every
response is counted in ``mnemostream_http_responses_total{route,status}`` (``route`` is the
path template, ``other`` for no route).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ranker.metrics import Metrics
from ranker.problems import problem_body

RETRY_AFTER_S = 1
"""The retry hint of a refused request: the service drains its in-flight requests in about this."""


class Admission:
    """The middleware. ``routes``: the app's routes, read at call time (for the route label)."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        max_in_flight: int,
        metrics: Metrics,
        routes: Callable[[], Sequence[BaseRoute]],
    ) -> None:
        if max_in_flight < 1:
            msg = f"max_in_flight={max_in_flight}: must be at least 1"
            raise ValueError(msg)
        self.app = app
        self.max_in_flight = max_in_flight
        self.metrics = metrics
        self.routes = routes
        self.in_flight = 0
        self._static: dict[tuple[object, object], str] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        route = self._route(scope)
        status = 500  # an exception escaping the app is answered 500 by the server

        async def counted(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        admitted = str(scope.get("path", "")).startswith("/v1/")
        try:
            if admitted and self.in_flight >= self.max_in_flight:
                await self._refuse(counted)
                return
            if admitted:
                self.in_flight += 1
                self.metrics.in_flight.set(self.in_flight)
            try:
                await self.app(scope, receive, counted)
            finally:
                if admitted:
                    self.in_flight -= 1
                    self.metrics.in_flight.set(self.in_flight)
        finally:
            self.metrics.http_responses.labels(route, str(status)).inc()

    async def _refuse(self, send: Send) -> None:
        detail = f"{self.in_flight} requests in flight; retry after {RETRY_AFTER_S} s"
        body, own = problem_body(429, detail, retry_after_s=RETRY_AFTER_S)
        headers = [(k.encode(), v.encode()) for k, v in own.items()]
        headers.append((b"content-length", str(len(body)).encode()))
        await send({"type": "http.response.start", "status": 429, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    def _route(self, scope: Scope) -> str:
        """The label of the route serving ``scope``; remembered for paths without parameters
        (a bounded set: the app's own), matched again for the rest.
        """
        key = (scope.get("method"), scope.get("path"))
        label = self._static.get(key)
        if label is not None:
            return label
        label = "other"
        for route in self.routes():
            match, _ = route.matches(scope)
            if match is Match.FULL:
                label = str(getattr(route, "path", "other"))
                break
        if label == key[1]:  # the path is the route's own: no parameter in it
            self._static[key] = label
        return label
