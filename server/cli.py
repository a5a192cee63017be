"""``mnemo``: run the pieces, start and stop the local stack, load memories, consolidate.

mnemo serve | worker | ranker        run a process (settings: MNEMO_* variables)
mnemo up | down                      the local stack (scripts/stack.sh, from a checkout)
mnemo load FILE.jsonl --api-key K    write memories through the HTTP API, with progress
mnemo consolidate --tenant T [--dry-run]
mnemo state-hash [--app-id A]          hash of every memory state in the worker's tables
mnemo rebuild [--collection C] [--drop]  Milvus rows from the worker's tables, and the hash
mnemo tenants list | get | put | add-key | revoke-key | delete ...   tenants, policies, API keys
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parents[1]


def _batches(path: Path, size: int) -> Iterator[list[dict[str, Any]]]:
    batch: list[dict[str, Any]] = []
    with path.open("rb") as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                doc = orjson.loads(line)
            except orjson.JSONDecodeError as exc:
                msg = f"{path}:{number}: not JSON: {exc}"
                raise SystemExit(msg) from exc
            if not isinstance(doc, dict) or not isinstance(doc.get("content"), str):
                msg = f"{path}:{number}: expected an object with a string 'content'"
                raise SystemExit(msg)
            batch.append(doc)
            if len(batch) == size:
                yield batch
                batch = []
    if batch:
        yield batch


def load(args: argparse.Namespace) -> int:
    """Write every line of a JSONL file; a progress line on stderr; ids to stdout with --ids."""
    from mnemostream import Client  # noqa: PLC0415

    total = sum(1 for line in args.file.open("rb") if line.strip())
    done, started = 0, time.monotonic()
    with Client(args.url, args.api_key) as client:
        for batch in _batches(args.file, args.batch):
            ids = client.remember_many(batch)
            done += len(ids)
            if args.ids:
                print("\n".join(ids))
            filled = int(30 * done / max(total, 1))
            rate = done / max(time.monotonic() - started, 1e-9)
            bar = "#" * filled + "." * (30 - filled)
            print(f"\r[{bar}] {done}/{total} ({rate:,.0f}/s)", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    return 0


MAX_BATCH = 1_000
"""Memories in one ``POST /v1/memories`` at most (the API refuses more)."""


def _batch_size(text: str) -> int:
    """``--batch``: a whole number of memories per request, 1 to :data:`MAX_BATCH`."""
    try:
        size = int(text)
    except ValueError:
        size = 0
    if not 1 <= size <= MAX_BATCH:
        msg = f"expected a whole number from 1 to {MAX_BATCH}, got {text!r}"
        raise argparse.ArgumentTypeError(msg)
    return size


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``mnemo`` command."""
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="mnemo", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    for name in ("serve", "worker", "ranker"):  # their own parsers read the rest (and --help)
        commands.add_parser(name, add_help=False)
    for name in ("up", "down"):
        commands.add_parser(name)
    loader = commands.add_parser("load", help="write a JSONL file of memories")
    loader.add_argument("file", type=Path)
    loader.add_argument("--url", default="http://127.0.0.1:8080")
    loader.add_argument("--api-key", required=True)
    loader.add_argument("--batch", type=_batch_size, default=200, help="memories per request")
    loader.add_argument("--ids", action="store_true", help="print the ids written")
    commands.add_parser("consolidate", add_help=False)
    for name in ("state-hash", "rebuild", "tenants"):
        commands.add_parser(name, add_help=False)
    args, rest = parser.parse_known_args(argv)
    if rest and args.command in ("load", "up", "down"):
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    if args.command == "load":
        return load(args)
    if args.command == "consolidate":
        from streams import cli  # noqa: PLC0415

        return cli.main(rest)
    if args.command == "tenants":
        from streams import tenants_cli  # noqa: PLC0415

        return tenants_cli.main(rest)
    if args.command in ("state-hash", "rebuild"):
        from streams import rebuild  # noqa: PLC0415

        return rebuild.main(args.command, rest)
    if args.command in ("up", "down"):
        return subprocess.call([str(ROOT / "scripts" / "stack.sh"), args.command])  # noqa: S603
    sys.argv = [f"mnemo {args.command}", *rest]  # the process's own parser refuses what it lacks
    if args.command == "worker":
        from streams.__main__ import main as run  # noqa: PLC0415
    elif args.command == "ranker":
        from ranker.__main__ import main as run  # noqa: PLC0415
    else:
        from server.__main__ import main as run  # noqa: PLC0415
    run()
    return 0
