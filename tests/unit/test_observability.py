"""The alert rules and the Grafana dashboard in deploy/ name only metrics the code exposes."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import yaml
from prometheus_client import CollectorRegistry

from ranker.metrics import Metrics
from streams.metrics import WorkerMetrics
from tests.infra import ROOT

RULES = ROOT / "deploy" / "prometheus" / "alerts.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "mnemostream.json"
NAME = re.compile(r"\bmnemostream_[a-z0-9_]+")
SUFFIXES = {
    "counter": ("_total",),
    "histogram": ("_bucket", "_sum", "_count"),
    "gauge": ("",),
    "summary": ("_sum", "_count", ""),
}


def exposed(*registries: CollectorRegistry) -> set[str]:
    """Every sample name the registries can serve, labelled or not yet."""
    names = set()
    for registry in registries:
        for family in registry.collect():
            names |= {family.name + suffix for suffix in SUFFIXES[family.type]}
    return names


def rules() -> Iterator[dict[str, object]]:
    doc = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    for group in doc["groups"]:
        yield from group["rules"]


def dashboard_exprs() -> list[str]:
    doc = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return [target["expr"] for panel in doc["panels"] for target in panel["targets"]]


def test_every_metric_named_in_rules_and_dashboard_exists() -> None:
    names = exposed(Metrics().registry, WorkerMetrics().registry)
    exprs = [str(rule["expr"]) for rule in rules()] + dashboard_exprs()
    used = {name for expr in exprs for name in NAME.findall(expr)}
    assert used, "no metric found"
    assert used <= names, sorted(used - names)
    # what the issue asks to watch is there: lag, dead letters, 429/503, recall p99
    text = " ".join(exprs)
    for needed in (
        "mnemostream_worker_consumer_lag",
        "mnemostream_worker_dead_letter_total",
        'status="429"',
        'status="503"',
        "histogram_quantile(0.99, sum by (le) (rate(mnemostream_recall_seconds_bucket",
    ):
        assert needed in text, needed


def test_the_api_shares_count_the_api_routes_alone() -> None:
    """/readyz answers 503 while a new pod warms up, every 10 s: the probes' answers counted in
    the 503 share fired the unavailability alert during an ordinary rollout."""
    exprs = [str(rule["expr"]) for rule in rules()] + dashboard_exprs()
    shares = [e for e in exprs if "mnemostream_http_responses_total" in e and " / " in e]
    assert len(shares) >= 3
    for expr in shares:
        selectors = re.findall(r"mnemostream_http_responses_total(\{[^}]*\})?", expr)
        assert all('route=~"/v1/.*"' in sel for sel in selectors), expr


def test_every_rule_is_complete() -> None:
    alerts = list(rules())
    assert len({rule["alert"] for rule in alerts}) == len(alerts)
    for rule in alerts:
        assert set(rule) >= {"alert", "expr", "for", "labels", "annotations"}, rule
        labels, annotations = rule["labels"], rule["annotations"]
        assert isinstance(labels, dict)
        assert labels["severity"] in {"warning", "critical"}
        assert isinstance(annotations, dict)
        assert annotations["summary"]
