"""The command line of a service process: ``--help`` lists its ``MNEMO_*`` settings and exits;
any other argument is an error (settings come from the environment, never from arguments).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings


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


def parse_service_args(
    prog: str, description: str, settings: Sequence[type[BaseSettings]], argv: Sequence[str]
) -> None:
    """Parse ``argv`` of a service that takes no argument: exit 0 after ``--help``, 2 on anything
    else (so that a mistyped option never starts the service).
    """
    parser = argparse.ArgumentParser(
        prog=prog,
        description=description,
        epilog=settings_help(*settings),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.parse_args(list(argv))
