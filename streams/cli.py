"""``python -m streams consolidate``: ask the worker to consolidate and print its report.

Produces a request on the consolidation topic and waits (``--wait`` seconds) for the report the
worker writes on the audit topic under the same request id. With ``--dry-run`` nothing is applied.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.errors import KafkaError

from memcore import InvalidField, Strategy
from memcore.ids import check_id
from memcore.timecheck import check_event_time
from storage.compacted import CompactedLogError
from storage.usage import load_settings, plain
from streams import topics
from streams.settings import WorkerSettings

QUIET_S = 5.0  # for "*": seconds without a new report that end the wait (see complete)


async def consolidate(
    settings: WorkerSettings, args: argparse.Namespace, request_id: str | None = None
) -> list[dict[str, Any]]:
    """Send the request (under ``request_id``, a new one by default); return the reports (one per
    tenant) that arrive before the deadline.
    """
    request_id = request_id or new_request_id()
    request: dict[str, Any] = {
        "v": 1,
        "tenant_id": args.tenant,
        "at": (args.at or datetime.now(UTC)).isoformat(),
        "dry_run": args.dry_run,
        "request_id": request_id,
    }
    if args.strategies:
        request["strategies"] = args.strategies
    every = args.tenant == "*"
    known = await _tenant_ids(settings)  # before anything is sent
    if not every and args.tenant not in known:
        if settings.tenants_file is not None or settings.tenants:
            raise UnknownTenantError(args.tenant)
        print(  # the worker may hold a tenants file this shell was not given
            f"tenant {args.tenant!r} is not on the tenants topic and this shell names no tenants"
            " file (MNEMO_TENANTS_FILE): sent, for a worker that knows it",
            file=sys.stderr,
        )
    expected = len(known) if every else 1
    consumer = AIOKafkaConsumer(
        settings.topic(topics.AUDIT),
        **settings.kafka().client(),
        auto_offset_reset="latest",
        enable_auto_commit=False,
    )
    producer = AIOKafkaProducer(**settings.kafka().client(), acks="all")
    try:
        await consumer.start()
        await producer.start()
        await consumer.seek_to_end()
        value = orjson.dumps(request)
        await producer.send_and_wait(
            settings.topic(topics.CONSOLIDATION), key=args.tenant.encode(), value=value
        )
        found: list[dict[str, Any]] = []
        loop = asyncio.get_running_loop()
        deadline = loop.time() + args.wait
        last: float | None = None
        while not complete(len(found), expected, every, last, loop.time()) and (
            loop.time() < deadline
        ):
            for records in (await consumer.getmany(timeout_ms=500)).values():
                for record in records:
                    audit = orjson.loads(record.value)
                    if (
                        audit.get("kind") == "consolidation"
                        and audit.get("request_id") == request_id
                    ):
                        found.append(audit)
                        last = loop.time()
        return found
    finally:  # a client that did not start stops as well (else it warns that it is unclosed)
        await producer.stop()
        await consumer.stop()


def complete(found: int, expected: int, every: bool, last: float | None, now: float) -> bool:
    """Whether the reports are all in: ``found`` of ``expected`` (1 for one tenant; for ``*``
    the tenants known here). For ``*`` the worker may know tenants this process does not (a
    tenants file only it was given), so the wait also lasts until :data:`QUIET_S` pass after
    the last report (``last``, loop seconds; None: none yet).
    """
    if not every:
        return found >= expected
    return found >= expected and last is not None and now - last > QUIET_S


def new_request_id() -> str:
    """A request id of this command (the report and any dead letter carry it)."""
    return f"cli-{uuid.uuid4().hex[:12]}"


class UnknownTenantError(Exception):
    """The tenant a request names is in neither this shell's tenants file (or
    ``MNEMO_TENANTS``) nor the tenants topic: the worker would dead-letter the request, and no
    report would come.
    """


async def _tenant_ids(settings: WorkerSettings) -> frozenset[str]:
    """The tenants there are now (the file's and the tenants topic's)."""
    tenants = settings.tenant_log()
    try:
        await tenants.catch_up()
        return frozenset(tenants.tenants)
    finally:
        await tenants.stop()


def aware_time(text: str) -> datetime:
    """An ISO 8601 time with its timezone (``--at``): the worker refuses a request whose ``at``
    has none, so the command would only wait for a report that never comes.
    """
    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        msg = f"{text!r} is not an ISO 8601 time"
        raise argparse.ArgumentTypeError(msg) from None
    if at.utcoffset() is None:
        msg = f"{text!r} has no timezone (e.g. {text}+00:00 or {text}Z)"
        raise argparse.ArgumentTypeError(msg)
    return at


def positive_seconds(text: str) -> float:
    """``--wait``: seconds, a finite number above 0."""
    try:
        seconds = float(text)
    except ValueError:
        seconds = float("nan")
    if not 0 < seconds < float("inf"):
        msg = f"expected seconds above 0, got {text!r}"
        raise argparse.ArgumentTypeError(msg)
    return seconds


def arguments(prog: str = "python -m streams consolidate") -> argparse.ArgumentParser:
    """The ``consolidate`` command line, as ``prog`` (how the user called it)."""
    parser = argparse.ArgumentParser(prog=prog, description=plain(__doc__.splitlines()[0]))
    parser.add_argument("--tenant", required=True, help="tenant id, or * for every tenant")
    parser.add_argument("--dry-run", action="store_true", help="report the decisions, apply none")
    parser.add_argument(
        "--strategies",
        nargs="+",
        choices=[s.value for s in Strategy],
        help="default: all, in order",
    )
    parser.add_argument(
        "--at", type=aware_time, help="decision time, with its timezone (default: now)"
    )
    parser.add_argument(
        "--wait", type=positive_seconds, default=60.0, help="seconds to wait for the report"
    )
    return parser


def main(argv: list[str], prog: str = "python -m streams consolidate") -> int:
    """Parse ``consolidate`` arguments, run, print each decision; exit 1 when no report came.
    ``prog`` names the command in its usage and errors.
    """
    parser = arguments(prog)
    args = parser.parse_args(argv)
    settings = load_settings(WorkerSettings)
    if args.tenant != "*":  # the worker dead-letters a malformed id: no report would come
        try:
            check_id("tenant_id", args.tenant)
        except InvalidField as exc:
            parser.error(f"argument --tenant: {exc.reason}")
    if args.at is not None:  # the worker dead-letters a request past its window: no report
        skew = timedelta(seconds=settings.max_future_skew_s)
        try:
            check_event_time("at", args.at, datetime.now(UTC), skew)
        except InvalidField as exc:
            parser.error(f"argument --at: {exc.reason}")
    request_id = new_request_id()
    try:
        reports = asyncio.run(consolidate(settings, args, request_id))
    except (KafkaError, OSError) as exc:
        print(f"cannot reach the broker at {settings.kafka_bootstrap}: {exc}", file=sys.stderr)
        return 2
    except CompactedLogError as exc:  # reading the tenants: nothing was sent
        where = settings.kafka_bootstrap
        print(f"cannot read the tenants from {where}, nothing was sent: {exc}", file=sys.stderr)
        return 2
    except UnknownTenantError:
        parser.error(f"argument --tenant: no tenant {args.tenant!r} (tenants file and topic)")
    except InvalidField as exc:  # this shell's tenants file: nothing was sent
        print(f"cannot read the tenants, nothing was sent: {exc}", file=sys.stderr)
        return 2
    for report in reports:
        mode = "dry run" if report["dry_run"] else "applied"
        total = report.get("decisions_total", len(report["decisions"]))
        print(f"{report['tenant_id']}: {total} decisions ({mode})")
        for d in report["decisions"]:
            sources = f" <- {', '.join(d['sources'])}" if d["sources"] else ""
            print(f"  {d['kind']:<9} {d['target']}{sources}: {d['reason']}")
        if report.get("truncated"):
            print(f"  ... {total - len(report['decisions'])} more (each in its memory's history)")
    if not reports:
        print(
            f"no consolidation report within {args.wait:g} s for request {request_id}: the"
            " request stays queued and a worker that is down or behind still applies it (do not"
            " send it again); a request the worker refused (a tenant it does not know) is on the"
            " dead-letter topic under this request id",
            file=sys.stderr,
        )
    return 0 if reports else 1
