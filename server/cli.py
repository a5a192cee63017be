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
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from memcore import normalise_content

ROOT = Path(__file__).resolve().parents[1]


#: The commands another module's parser reads (``--help`` included), with ``mnemo --help``'s line.
COMMANDS = {
    "serve": "run the worker and the HTTP API in one process (python -m server)",
    "worker": "run the stream worker (python -m streams)",
    "ranker": "run the HTTP API (python -m ranker)",
}
TOOLS = {
    "consolidate": "ask the worker to consolidate a tenant; print its decisions",
    "state-hash": "hash every memory state in the worker's tables",
    "rebuild": "rewrite Milvus rows from the worker's tables",
    "tenants": "list, get, put, delete tenants; add and revoke API keys",
}

LOAD_TRIES = 6
"""Sends of one batch at most while the service answers retriably (429, 503, no reply)."""


def _memories(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Each memory of a JSONL file with its line number (blank lines skipped, a UTF-8 BOM
    ignored); SystemExit naming the line when one is not an object with a string ``content`` of
    more than whitespace, and naming the file when it cannot be read.
    """
    try:
        with path.open("rb") as lines:
            for number, line in enumerate(lines, 1):
                text = line.removeprefix(b"\xef\xbb\xbf") if number == 1 else line
                if not text.strip():
                    continue
                try:
                    doc = orjson.loads(text)
                except orjson.JSONDecodeError as exc:
                    msg = f"{path}:{number}: not JSON: {exc}"
                    raise SystemExit(msg) from exc
                if not isinstance(doc, dict) or not isinstance(doc.get("content"), str):
                    msg = f"{path}:{number}: expected an object with a string 'content'"
                    raise SystemExit(msg)
                if not normalise_content(doc["content"]):  # the API refuses it: a load half done
                    raise SystemExit(f"{path}:{number}: content: nothing but whitespace")
                yield number, doc
    except OSError as exc:
        msg = f"{path}: cannot read: {exc.strerror or exc}"
        raise SystemExit(msg) from exc


def _batches(path: Path, size: int) -> Iterator[list[tuple[int, dict[str, Any]]]]:
    batch: list[tuple[int, dict[str, Any]]] = []
    for numbered in _memories(path):
        batch.append(numbered)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def _sent(client: Any, batch: list[dict[str, Any]]) -> list[str]:  # noqa: ANN401
    """``client.remember_many(batch)``, sent again while the service answers retriably, after
    its ``Retry-After`` (else 1, 2, 4, ... s): ids derive from the content, so a batch sent again
    folds into the same memories (one the service had applied before it answered counts one
    more write, in its history too).
    """
    from mnemostream import MnemostreamError  # noqa: PLC0415

    for attempt in range(LOAD_TRIES):
        try:
            ids: list[str] = client.remember_many(batch)
            return ids
        except MnemostreamError as exc:
            if not exc.retriable or attempt == LOAD_TRIES - 1:
                raise
            wait = exc.retry_after_s or 2**attempt
            print(
                f"\n{exc}: sending again in {wait:g} s ({attempt + 2} of {LOAD_TRIES})",
                file=sys.stderr,
            )
            time.sleep(wait)
    raise AssertionError  # the loop returns or raises


def _refusal(path: Path, batch: list[tuple[int, dict[str, Any]]], exc: Exception) -> str:
    """One line for a batch the service refused: the file's line when a 422 names a memory."""
    field = getattr(exc, "field", None) or ""
    named = re.match(r"memories\[(\d+)\]\.?(.*)", field)
    if named is not None and int(named.group(1)) < len(batch):
        number = batch[int(named.group(1))][0]
        return f"{path}:{number}: {named.group(2) or 'memory'}: {getattr(exc, 'detail', exc)}"
    return f"mnemo load: {exc}"


def load(args: argparse.Namespace) -> int:
    """Write every line of a JSONL file; a progress line on stderr; ids to stdout with --ids.
    Every line is checked before anything is sent. A batch the service answers retriably (429,
    503, no reply) is sent again; one it refuses ends the load with one line naming the file's
    line when it can (exit 1; 130 on Ctrl-C), the memories before it written.
    """
    from mnemostream import Client, MnemostreamError  # noqa: PLC0415

    done, total, started = 0, 0, time.monotonic()
    try:
        total = sum(1 for _ in _memories(args.file))  # every line checked before any is sent
        try:
            client = Client(args.url, _api_key(args))
        except ValueError as exc:  # no key, or one no header can carry
            print(f"--api-key: {exc}", file=sys.stderr)
            return 1
        with client:
            for batch in _batches(args.file, args.batch):
                try:
                    ids = _sent(client, [doc for _, doc in batch])
                except (MnemostreamError, ValueError) as exc:
                    print(file=sys.stderr)
                    print(_refusal(args.file, batch, exc), file=sys.stderr)
                    print(f"{done} of {total} written", file=sys.stderr)
                    return 1
                done += len(ids)
                if args.ids:
                    print("\n".join(ids))
                filled = int(30 * done / max(total, 1))
                rate = done / max(time.monotonic() - started, 1e-9)
                bar = "#" * filled + "." * (30 - filled)
                print(
                    f"\r[{bar}] {done}/{total} ({rate:,.0f}/s)", end="", file=sys.stderr, flush=True
                )
    except KeyboardInterrupt:
        print(f"\ninterrupted: {done} of {total} written", file=sys.stderr)
        return 130
    print(file=sys.stderr)
    return 0


def _api_key(args: argparse.Namespace) -> str:
    """``--api-key``, or the key in ``--api-key-file`` (kept out of the process list); SystemExit
    naming the file when it cannot be read.
    """
    if args.api_key_file is None:
        return str(args.api_key)
    try:
        return str(args.api_key_file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise SystemExit(f"--api-key-file: {args.api_key_file}: cannot read: {exc}") from exc


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
    parser = argparse.ArgumentParser(
        prog="mnemo",
        description=__doc__.splitlines()[0].replace("``", ""),  # storage.usage.plain: 0.35 s
        epilog="mnemo COMMAND --help: the command's own options (a process's: its settings)",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, does in COMMANDS.items():  # their own parsers read the rest (and --help)
        commands.add_parser(name, add_help=False, help=does)
    for name, does in (("up", "start the local stack"), ("down", "stop the local stack")):
        commands.add_parser(name, help=does)
    loader = commands.add_parser("load", help="write a JSONL file of memories")
    loader.add_argument("file", type=Path)
    loader.add_argument("--url", default="http://127.0.0.1:8080", help="default: %(default)s")
    key = loader.add_mutually_exclusive_group(required=True)
    key.add_argument("--api-key", help="the tenant's key (shown in the process list)")
    key.add_argument(
        "--api-key-file",
        type=Path,
        help="a file holding the tenant's key (not in the process list)",
    )
    loader.add_argument(
        "--batch", type=_batch_size, default=200, help="memories per request (default: %(default)s)"
    )
    loader.add_argument("--ids", action="store_true", help="print the ids written")
    for name, does in TOOLS.items():
        commands.add_parser(name, add_help=False, help=does)
    args, rest = parser.parse_known_args(argv)
    prog = f"mnemo {args.command}"
    if rest and args.command in ("load", "up", "down"):
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    if args.command == "load":
        return load(args)
    if args.command == "consolidate":
        from streams import cli  # noqa: PLC0415

        return cli.main(rest, prog)
    if args.command == "tenants":
        from streams import tenants_cli  # noqa: PLC0415

        return tenants_cli.main(rest, prog)
    if args.command in ("state-hash", "rebuild"):
        from streams import rebuild  # noqa: PLC0415

        return rebuild.main(args.command, rest, prog)
    if args.command in ("up", "down"):
        return subprocess.call([str(ROOT / "scripts" / "stack.sh"), args.command])  # noqa: S603
    sys.argv = [prog, *rest]  # the process's own parser refuses what it lacks
    if args.command == "worker":
        from streams.__main__ import main as run  # noqa: PLC0415
    elif args.command == "ranker":
        from ranker.__main__ import main as run  # noqa: PLC0415
    else:
        from server.__main__ import main as run  # noqa: PLC0415
    run(prog)
    return 0
