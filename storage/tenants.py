"""The tenant registry: which tenants exist, their policy, and their API keys.

A JSON file::

    {"tenants": {"acme": {"decay": "zeromemory", "lifecycle": "default", "recall": "mnemostream",
                          "overrides": {"review": {"reinforcement": 0.2}}, "api_keys": ["k-..."]}}}

Every field but the tenant id is optional. Loading validates every policy (InvalidField names it).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memcore import InvalidField, Policy
from memcore.ids import check_id


@dataclass(frozen=True)
class Tenant:
    """One tenant: its validated policy and the API keys that act for it."""

    tenant_id: str
    policy: Policy = field(default_factory=Policy)
    api_keys: tuple[str, ...] = ()


@dataclass(frozen=True)
class TenantRegistry:
    """Known tenants by id. A tenant not in it is unknown everywhere."""

    tenants: Mapping[str, Tenant]

    def get(self, tenant_id: str) -> Tenant | None:
        return self.tenants.get(tenant_id)

    def by_api_key(self, api_key: str) -> Tenant | None:
        """The tenant an API key acts for, or None."""
        for tenant in self.tenants.values():
            if api_key in tenant.api_keys:
                return tenant
        return None

    @classmethod
    def of(cls, spec: Mapping[str, Any]) -> TenantRegistry:
        """Build from the parsed JSON document (see the module docstring)."""
        tenants = spec.get("tenants")
        if not isinstance(tenants, Mapping):
            raise InvalidField("tenants", tenants, "expected an object of tenant id -> settings")
        out: dict[str, Tenant] = {}
        seen_keys: set[str] = set()
        for tenant_id, given in tenants.items():
            check_id(f"tenants.{tenant_id}", tenant_id)
            entry = given or {}
            if not isinstance(entry, Mapping):
                raise InvalidField(f"tenants.{tenant_id}", entry, "expected an object")
            policy = Policy.build(
                decay=entry.get("decay", "zeromemory"),
                lifecycle=entry.get("lifecycle", "default"),
                recall=entry.get("recall", "mnemostream"),
                overrides=entry.get("overrides") or {},
            )
            keys = tuple(entry.get("api_keys", ()))
            for key in keys:
                if not isinstance(key, str) or len(key) < 16:
                    raise InvalidField(
                        f"tenants.{tenant_id}.api_keys", "***", "keys are strings of 16+ characters"
                    )
                if key in seen_keys:
                    raise InvalidField(
                        f"tenants.{tenant_id}.api_keys", "***", "a key may act for one tenant only"
                    )
                seen_keys.add(key)
            out[tenant_id] = Tenant(tenant_id, policy, keys)
        return cls(out)

    @classmethod
    def load(cls, path: Path) -> TenantRegistry:
        """Read and validate a registry file."""
        try:
            spec = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise InvalidField("tenants_file", str(path), f"cannot read: {exc}") from exc
        return cls.of(spec)

    @classmethod
    def open_to(cls, tenant_ids: list[str]) -> TenantRegistry:
        """Tenants with the default policy and no API keys."""
        return cls({t: Tenant(check_id("tenants", t)) for t in tenant_ids})
