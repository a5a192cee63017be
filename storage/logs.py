"""Every process's log lines, as JSON or text (``MNEMO_LOG_FORMAT``, ``MNEMO_LOG_LEVEL``).

``json`` writes every log record as one JSON object (``ts``, ``level``, ``logger``, ``message``,
``request_id``, ``tenant_id``, ``exc``; an HTTP request's line adds ``method``, ``route``,
``status``, ``duration_ms``); ``text`` writes the same fields as plain lines. ``request_id`` and
``tenant_id`` are those of the HTTP request being served (:data:`request_context`, set by the
ranker's ``RequestLog``), None elsewhere (the stream worker's records).
"""

from __future__ import annotations

import contextvars
import logging
import logging.config
from datetime import UTC, datetime
from typing import Any, Literal

import orjson

LogFormat = Literal["json", "text"]
LogLevel = Literal["debug", "info", "warning", "error", "critical"]

request_context: contextvars.ContextVar[dict[str, str | None] | None] = contextvars.ContextVar(
    "mnemostream_request", default=None
)
"""The request being served: ``{"request_id": ..., "tenant_id": ...}``, or None."""


class RequestContext(logging.Filter):
    """Adds ``request_id`` and ``tenant_id`` (None outside a request) to every record."""

    def filter(self, record: logging.LogRecord) -> bool:
        current = request_context.get() or {}
        record.request_id = current.get("request_id")
        record.tenant_id = current.get("tenant_id")
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per record."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            "request_id": getattr(record, "request_id", None),
            "tenant_id": getattr(record, "tenant_id", None),
        }
        for name in ("method", "route", "status", "duration_ms"):
            if hasattr(record, name):
                line[name] = getattr(record, name)
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(line, default=str).decode()


TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s [%(request_id)s %(tenant_id)s]: %(message)s"


def logging_config(log_format: LogFormat, level: int | str = logging.INFO) -> dict[str, Any]:
    """A :func:`logging.config.dictConfig` document routing every logger (uvicorn's too) to one
    stderr handler in ``log_format``, with ``request_id`` and ``tenant_id`` on every record;
    loggers that exist already keep working. ``python -m server`` hands it to the Faust worker,
    which would otherwise format every line in colour (~7 % of a recall's CPU for the access
    line alone) and ignore ``MNEMO_LOG_FORMAT``; ``python -m streams`` does with ``json``.
    """
    formatter: dict[str, Any] = (
        {"()": f"{__name__}.JsonFormatter"} if log_format == "json" else {"format": TEXT_FORMAT}
    )
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {"request": {"()": f"{__name__}.RequestContext"}},
        "formatters": {"line": formatter},
        "handlers": {
            "stderr": {
                "class": "logging.StreamHandler",
                "formatter": "line",
                "filters": ["request"],
            }
        },
        "root": {"level": level, "handlers": ["stderr"]},
        "loggers": {
            "uvicorn": {"handlers": [], "propagate": True},
            "uvicorn.error": {"handlers": [], "propagate": True},
            # our access line (RequestLog) replaces uvicorn's
            "uvicorn.access": {"handlers": [], "propagate": False},
        },
    }


def configure(log_format: LogFormat, level: int | str = logging.INFO) -> None:
    """Apply :func:`logging_config` to this process."""
    logging.config.dictConfig(logging_config(log_format, level))
