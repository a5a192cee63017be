"""``python -m streams tenants`` (or ``mnemo tenants``): manage tenants on the ``tenants`` topic.

    tenants list                          every tenant (the file's and the topic's), no keys
    tenants get TENANT
    tenants put TENANT [--decay D] [--lifecycle L] [--recall R] [--overrides JSON]
                       [--rate-limit-per-s N] [--create] [--reuse]
                                          replace the settings (keys are kept); --create: make
                                          it when this command finds none (a tenant of a
                                          tenants file it does not read would lose its keys);
                                          --reuse: under the id of one deleted with its
                                          memories kept, which it then reads
    tenants add-key TENANT                a new API key, printed once (only its digest is kept)
    tenants revoke-key TENANT KEY_ID      KEY_ID: 8+ leading hex digits of the key's SHA-256
    tenants delete TENANT

The same records as the admin HTTP routes (``/v1/admin/tenants``); running services pick every
change up without a restart. Settings (broker, topic prefix, tenants file) from ``MNEMO_*``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

from memcore import InvalidField
from storage.tenant_log import TenantLog, TenantLogError
from storage.tenants import (
    KEY_ID_CHARS,
    ReusedTenant,
    Tenant,
    key_hash,
    new_api_key,
    replaced,
    with_key,
    without_key,
)
from storage.usage import load_settings, plain
from streams.settings import WorkerSettings


def parser(prog: str = "python -m streams tenants") -> argparse.ArgumentParser:
    """The command line's parser (see the module doc), as ``prog`` (how the user called it)."""
    p = argparse.ArgumentParser(
        prog=prog,
        description=plain(__doc__).splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n".join(plain(__doc__).splitlines()[2:]),
    )
    commands = p.add_subparsers(dest="command", required=True)
    commands.add_parser("list")
    for name in ("get", "add-key", "delete"):
        commands.add_parser(name).add_argument("tenant")
    put = commands.add_parser("put")
    put.add_argument("tenant")
    put.add_argument("--decay", default="zeromemory")
    put.add_argument("--lifecycle", default="default")
    put.add_argument("--recall", default="mnemostream")
    put.add_argument("--overrides", type=json.loads, default={}, help="JSON: section -> fields")
    put.add_argument("--rate-limit-per-s", type=float, default=None, help="0: unlimited")
    put.add_argument("--create", action="store_true", help="make the tenant when none is found")
    put.add_argument("--reuse", action="store_true", help="reuse the id of a deleted tenant")
    revoke = commands.add_parser("revoke-key")
    revoke.add_argument("tenant")
    revoke.add_argument("key_id")
    return p


async def run(log: TenantLog, args: argparse.Namespace) -> Any:  # noqa: ANN401 - JSON to print
    """Do the command on ``log`` (started here, stopped after); the JSON to print."""
    try:
        await log.catch_up()
        if args.command in ("list", "get") and not await log.exists():  # not an empty registry
            msg = (
                f"{log.topic} does not exist (the stream worker creates it): check"
                " MNEMO_TOPIC_PREFIX and MNEMO_KAFKA_BOOTSTRAP"
            )
            raise TenantLogError(msg)
        if args.command == "list":
            return {"tenants": [log.tenants[t].public() for t in sorted(log.tenants)]}
        if args.command == "get":
            found = log.get(args.tenant)
            if found is None:
                raise LookupError(args.tenant)
            return found.public()
        if args.command == "put":
            settings = {
                "decay": args.decay,
                "lifecycle": args.lifecycle,
                "recall": args.recall,
                "overrides": args.overrides,
                "rate_limit_per_s": args.rate_limit_per_s,
            }

            def change(current: Tenant | None) -> Tenant:
                if current is None and not args.create:
                    raise LookupError(f"{args.tenant} (pass --create to make it)")
                return replaced(current, args.tenant, settings)

            changed = await log.update(args.tenant, change, reuse=args.reuse)
            return changed.public() if changed is not None else None
        if args.command == "add-key":
            api_key = new_api_key()
            await log.update(args.tenant, lambda t: with_key(_found(t, args.tenant), api_key))
            key_id = key_hash(api_key)[:KEY_ID_CHARS]
            return {"tenant_id": args.tenant, "api_key": api_key, "key_id": key_id}
        if args.command == "revoke-key":
            changed = await log.update(
                args.tenant, lambda t: without_key(_found(t, args.tenant), args.key_id)
            )
            return changed.public() if changed is not None else None
        await log.update(args.tenant, lambda t: _deleted(_found(t, args.tenant)))
        return {"tenant_id": args.tenant, "deleted": True}
    finally:
        await log.stop()


def _found(tenant: Tenant | None, tenant_id: str) -> Tenant:
    if tenant is None:
        raise LookupError(tenant_id)
    return tenant


def _deleted(_: object) -> None:
    return None


def main(argv: list[str], prog: str = "python -m streams tenants") -> int:
    """Run one command; print its JSON. Exit 1: not found or invalid; 2: Kafka not answering.
    ``prog`` names the command in its usage and errors.
    """
    args = parser(prog).parse_args(argv)
    try:
        print(
            json.dumps(asyncio.run(run(load_settings(WorkerSettings).tenant_log(), args)), indent=2)
        )
    except LookupError as exc:
        print(f"no such tenant or key: {exc.args[0]}", file=sys.stderr)
        return 1
    except InvalidField as exc:
        print(f"invalid: {exc}", file=sys.stderr)
        return 1
    except ReusedTenant as exc:
        print(f"{exc} (--reuse)", file=sys.stderr)
        return 1
    except TenantLogError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    return 0
