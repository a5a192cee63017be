"""Vendor the OpenAPI schemas of the custom resources in ``k8s/`` for the offline manifest tests.

    python scripts/vendor_crd_schemas.py SOURCE CRD.yaml VERSION [CRD.yaml VERSION ...]

reads each CustomResourceDefinition file (taken from the upstream repository at a release tag),
keeps only the ``openAPIV3Schema`` of the named version, drops every ``description`` text (the
schemas shrink to a fraction and no check reads them) and writes compact JSON to
``tests/data/crds/<group>_<version>_<Kind>.json`` with the source recorded in it. SOURCE says where
the files came from (repository, tag and path); see ``tests/data/crds/README.md`` for the files in use.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml

OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "crds"


def strip_descriptions(node: Any) -> Any:  # noqa: ANN401 - any JSON value
    """The schema without its ``description`` texts (a property *named* description is kept)."""
    if isinstance(node, dict):
        return {
            key: strip_descriptions(value)
            for key, value in node.items()
            if not (key == "description" and isinstance(value, str))
        }
    if isinstance(node, list):
        return [strip_descriptions(item) for item in node]
    return node


def vendor(source: str, path: Path, version: str) -> Path:
    """Write the schema of ``version`` of the CRD in ``path``; returns the file written."""
    crd = yaml.safe_load(path.read_text(encoding="utf-8"))
    spec = crd["spec"]
    (served,) = (v for v in spec["versions"] if v["name"] == version)
    document = {
        "group": spec["group"],
        "version": version,
        "kind": spec["names"]["kind"],
        "source": f"{source} {path.name}",
        "transform": "spec.versions[name=version].schema.openAPIV3Schema, descriptions removed",
        "deprecated": bool(served.get("deprecated", False)),
        "schema": strip_descriptions(served["schema"]["openAPIV3Schema"]),
    }
    out = OUT / f"{spec['group']}_{version}_{spec['names']['kind']}.json"
    out.write_text(
        json.dumps(document, sort_keys=True, separators=(",", ":")) + "\n", encoding="utf-8"
    )
    return out


def main(argv: list[str]) -> int:
    """Vendor each (file, version) pair named on the command line."""
    if len(argv) < 3 or len(argv) % 2 == 0:
        print(__doc__, file=sys.stderr)
        return 2
    source, pairs = argv[0], argv[1:]
    for path, version in zip(pairs[::2], pairs[1::2], strict=True):
        print(vendor(source, Path(path), version))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
