"""The SDK installs alone: into an empty virtual environment it brings httpx and nothing of the
service (no torch, Faust, Kafka client or Milvus), and it imports and type-checks as a package.
"""

from __future__ import annotations

import shutil
import subprocess
from importlib import metadata
from pathlib import Path

import pytest

from tests.infra import ROOT

pytestmark = pytest.mark.integration
SERVICE_ONLY = {"torch", "faust-streaming", "aiokafka", "pymilvus", "milvus-lite", "faiss-cpu"}


def test_the_sdk_installs_into_an_empty_venv_without_the_service(tmp_path: Path) -> None:
    uv = shutil.which("uv")
    assert uv is not None, "uv is installed by `make install`"
    venv = tmp_path / "venv"
    subprocess.run([uv, "venv", "--quiet", str(venv)], check=True, timeout=120)
    python = str(venv / "bin" / "python")
    httpx = f"httpx=={metadata.version('httpx')}"  # the locked one: served from uv's cache
    subprocess.run(
        [uv, "pip", "install", "--quiet", "--python", python, str(ROOT / "sdk"), httpx],
        check=True,
        timeout=300,
    )
    listed = subprocess.run(
        [uv, "pip", "list", "--python", python, "--format", "freeze"],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    installed = {line.split("==")[0].lower() for line in listed.split()}
    assert "mnemostream" in installed
    assert "httpx" in installed
    assert installed.isdisjoint(SERVICE_ONLY), installed & SERVICE_ONLY
    probe = (
        "import importlib.resources, mnemostream;"
        "print(mnemostream.Client.__name__, mnemostream.AsyncClient.__name__,"
        " importlib.resources.files('mnemostream').joinpath('py.typed').is_file())"
    )
    out = subprocess.run(
        [python, "-c", probe], cwd=tmp_path, check=True, capture_output=True, text=True, timeout=60
    ).stdout
    assert out.split() == ["Client", "AsyncClient", "True"]
    for service in ("memcore", "storage", "streams", "ranker", "server"):
        gone = subprocess.run(  # not from the checkout: cwd is on a `-c` script's path
            [python, "-c", f"import {service}"],
            cwd=tmp_path,
            check=False,
            capture_output=True,
            timeout=60,
        )
        assert gone.returncode != 0, f"{service} came with the SDK"
