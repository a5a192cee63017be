"""The command line of a service process: ``--help`` lists its ``MNEMO_*`` settings and exits;
any other argument is an error (settings come from the environment, never from arguments).
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator, Sequence
from typing import TypeVar

from aiokafka.errors import KafkaConnectionError
from pydantic import SecretStr, ValidationError
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings

from memcore import InvalidField
from storage.errors import StorageError

S = TypeVar("S", bound=BaseSettings)


def load_settings(settings: type[S]) -> S:
    """``settings()`` read from the environment, once, at start-up. A value it refuses ends the
    process (exit status 1) with one line per variable: its name, the value (hidden for a
    secret) and why, not a traceback naming the Python field.
    """
    try:
        return settings()
    except ValidationError as exc:
        prefix = str(settings.model_config.get("env_prefix", ""))
        lines = [_refused(settings, prefix, dict(error)) for error in exc.errors()]
        raise SystemExit("invalid settings:\n  " + "\n  ".join(lines)) from None


@contextlib.contextmanager
def refusing_start() -> Iterator[None]:
    """Around a process's start-up checks: a value they refuse (a tenants file that is not there,
    a CUDA device this machine lacks), a broker it cannot connect to or a Milvus that does not
    answer (a retriable StorageError), ends the process with its message naming the setting
    (exit status 1), not a traceback; any other error keeps its traceback.
    """
    try:
        yield
    except InvalidField as exc:
        raise SystemExit(f"cannot start: {exc}") from None
    except KafkaConnectionError as exc:  # the broker unreachable; other errors keep their trace
        msg = f"cannot start: Kafka (MNEMO_KAFKA_BOOTSTRAP and MNEMO_KAFKA_*): {exc}"
        raise SystemExit(msg) from None
    except StorageError as exc:
        if not exc.retriable:  # a Milvus that answers and refuses: its trace says where
            raise
        raise SystemExit(f"cannot start: Milvus (MNEMO_MILVUS_URI): {exc}") from None


def _refused(settings: type[BaseSettings], prefix: str, error: dict[str, object]) -> str:
    """One refused setting as a line; never a value read but the refused one's (not a secret)."""
    loc = error.get("loc")
    name = str(loc[0]) if isinstance(loc, tuple) and loc else None
    if name is not None and error.get("type") == "missing":  # its input: every value read
        return f"{prefix}{name.upper()}: {error.get('msg')}"
    if name is None or isinstance(error.get("input"), dict):
        # a check of several settings at once: its input is every value read, secrets too
        return f"settings: {error.get('msg')}"
    field = settings.model_fields.get(name)
    secret = field is not None and "SecretStr" in str(field.annotation)
    hidden = secret or isinstance(error.get("input"), SecretStr)
    shown = "(hidden)" if hidden else repr(error.get("input"))
    return f"{prefix}{name.upper()}={shown}: {error.get('msg')}"


def settings_help(*classes: type[BaseSettings]) -> str:
    """One line per setting of ``classes`` (each once): its variable, default and description."""
    lines = ["settings (environment variables):"]
    seen: set[str] = set()
    for settings in classes:
        prefix = str(settings.model_config.get("env_prefix", ""))
        for name, info in settings.model_fields.items():
            if name in seen:
                continue
            seen.add(name)
            lines.append(_line(prefix, name, info))
    return "\n".join(lines)


def _line(prefix: str, name: str, info: FieldInfo) -> str:
    default = "required" if info.is_required() else repr(info.get_default())
    text = f"  {prefix}{name.upper()} (default {default})"
    if info.description:
        text += f": {info.description}"
    return text


def plain(doc: str | None) -> str:
    """A module docstring as a command's ``--help`` shows it: without reST's double backticks."""
    return (doc or "").replace("``", "")


def parse_service_args(
    prog: str, description: str, settings: Sequence[type[BaseSettings]], argv: Sequence[str]
) -> None:
    """Parse ``argv`` of a service that takes no argument: exit 0 after ``--help``, 2 on anything
    else (so that a mistyped option never starts the service).
    """
    parser = argparse.ArgumentParser(
        prog=prog,
        description=plain(description),
        epilog=settings_help(*settings),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.parse_args(list(argv))
