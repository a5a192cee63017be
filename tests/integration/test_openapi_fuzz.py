"""schemathesis over the live service's OpenAPI document: no 5xx, and every response (status,
content type, headers, body) is one the document declares. Real Kafka, real Milvus Lite.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from mnemostream import Client
from tests.integration.harness import Stack
from tests.integration.test_end_to_end import DIM, KEY, e, serve
from tests.integration.test_streams import T0

pytestmark = pytest.mark.integration
CHECKS = (
    "not_a_server_error",
    "status_code_conformance",
    "content_type_conformance",
    "response_headers_conformance",
    "response_schema_conformance",
)


@pytest.fixture
def server(make_stack: Callable[..., Stack], tmp_path: Path) -> Iterator[str]:
    yield from serve(make_stack(("acme",), dim=DIM), tmp_path)


def test_fuzzed_requests_get_no_server_error_and_only_documented_answers(
    server: str, tmp_path: Path
) -> None:
    with Client(server, KEY) as client:  # something to find, so reads reach Milvus
        client.remember_many(
            [{"content": f"seed {i}", "embedding": e(1.0, i), "at": T0} for i in range(5)]
        )
    st = Path(sys.executable).parent / "st"
    run = subprocess.run(
        [
            str(st),
            "run",
            f"{server}/openapi.json",
            "--header",
            f"Authorization: Bearer {KEY}",
            "--checks",
            ",".join(CHECKS),
            "--max-examples",
            "40",
            "--seed",
            "7",
            "--request-timeout",
            "30",
            "--no-color",
            "--report",
            "junit",
            "--report-dir",
            str(tmp_path),
        ],
        cwd=tmp_path,  # its cache and reports stay out of the checkout
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
    assert " passed" in run.stdout  # it tested something
