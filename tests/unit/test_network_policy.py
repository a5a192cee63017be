"""The NetworkPolicies of k8s/base let through every connection the deployment makes, and no more.

``default-deny-ingress`` isolates every pod of the namespace, the Milvus release's (k8s/milvus:
Milvus, its etcd and its MinIO) included, so each connection they need must be opened by a policy.
The policies are evaluated here as Kubernetes does (a pod selected by an Ingress policy takes only
what one of those policies' rules admits), over the pods the manifests and the Helm chart make.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.unit.test_manifests import one, rendered, workloads

Doc = dict[str, Any]
NAMESPACE = "mnemostream"


@dataclass(frozen=True)
class Pod:
    namespace: str
    labels: dict[str, str]
    ports: dict[str, int] = field(default_factory=dict)  # container port name -> number


def pod_of(docs: list[Doc], kind: str) -> Pod:
    workload = one(docs, kind)
    template = workload["spec"]["template"]
    ports = {
        p["name"]: p["containerPort"]
        for c in template["spec"]["containers"]
        for p in c.get("ports", [])
    }
    return Pod(workload["metadata"]["namespace"], template["metadata"]["labels"], ports)


#: The pods of the Helm release `milvus` (k8s/milvus/values.yaml), with the labels the charts give
#: them: zilliztech/milvus (``milvus.matchLabels``), Bitnami etcd (its common labels) and the MinIO
#: chart (``app: minio``, ``release``; its post-install job ``app: minio-job``).
MILVUS = Pod(
    NAMESPACE,
    {"app.kubernetes.io/name": "milvus", "app.kubernetes.io/instance": "milvus"},
    {"milvus": 19530},
)
ETCD = Pod(
    NAMESPACE,
    {"app.kubernetes.io/name": "etcd", "app.kubernetes.io/instance": "milvus"},
    {"client": 2379, "peer": 2380},
)
MINIO = Pod(NAMESPACE, {"app": "minio", "release": "milvus"}, {"http": 9000})
MINIO_JOB = Pod(NAMESPACE, {"app": "minio-job", "release": "milvus"})
ELSEWHERE = Pod("monitoring", {"app.kubernetes.io/name": "prometheus"})
NEIGHBOUR = Pod(NAMESPACE, {"app": "something-else"})


def selects(selector: Doc, labels: dict[str, str]) -> bool:
    assert set(selector) <= {"matchLabels"}, f"only matchLabels is evaluated here: {selector}"
    return all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items())


def admits_peer(peer: Doc, source: Pod) -> bool:
    assert set(peer) <= {"podSelector", "namespaceSelector"}, peer
    if "namespaceSelector" in peer:
        assert peer["namespaceSelector"] == {}, "only every namespace ({}) is evaluated here"
    elif source.namespace != NAMESPACE:
        return False
    return selects(peer.get("podSelector", {}), source.labels)


def admits_port(rule: Doc, target: Pod, port: int) -> bool:
    if "ports" not in rule:
        return True
    for item in rule["ports"]:
        assert item.get("protocol", "TCP") == "TCP"
        number = item["port"]
        if isinstance(number, str):
            number = target.ports.get(number)
        if number == port:
            return True
    return False


def allowed(policies: list[Doc], source: Pod, target: Pod, port: int) -> bool:
    """Whether a TCP connection from ``source`` to ``target``'s ``port`` is let in."""
    assert target.namespace == NAMESPACE
    selecting = [
        p
        for p in policies
        if "Ingress" in p["spec"]["policyTypes"]
        and selects(p["spec"]["podSelector"], target.labels)
    ]
    if not selecting:
        return True
    return any(
        ("from" not in rule or any(admits_peer(peer, source) for peer in rule["from"]))
        and admits_port(rule, target, port)
        for policy in selecting
        for rule in policy["spec"].get("ingress", [])
    )


@pytest.fixture(scope="module")
def base() -> list[Doc]:
    return rendered("base")


@pytest.fixture(scope="module")
def policies(base: list[Doc]) -> list[Doc]:
    return [d for d in base if d["kind"] == "NetworkPolicy"]


def let_through(
    policies: list[Doc], connections: list[tuple[str, Pod, Pod, int]]
) -> dict[str, bool]:
    """Each named connection (source, target, port): whether the policies let it through."""
    return {name: allowed(policies, src, dst, port) for name, src, dst, port in connections}


def test_every_connection_of_the_deployment_is_let_through(
    base: list[Doc], policies: list[Doc]
) -> None:
    assert len(workloads(base)) == 2
    ranker, worker = pod_of(base, "Deployment"), pod_of(base, "StatefulSet")
    needed = [
        ("a client -> the ranker's API", ELSEWHERE, ranker, ranker.ports["http"]),
        ("Prometheus -> the worker's metrics", ELSEWHERE, worker, worker.ports["metrics"]),
        ("Prometheus -> the ranker's metrics", ELSEWHERE, ranker, ranker.ports["metrics"]),
        ("the worker -> Milvus", worker, MILVUS, 19530),
        ("the ranker -> Milvus", ranker, MILVUS, 19530),
        ("Milvus -> etcd", MILVUS, ETCD, 2379),
        ("etcd -> etcd (peers)", ETCD, ETCD, 2380),
        ("Milvus -> MinIO", MILVUS, MINIO, 9000),
        ("MinIO's bucket job -> MinIO", MINIO_JOB, MINIO, 9000),
        ("Milvus -> Milvus (cluster.enabled: its components)", MILVUS, MILVUS, 53100),
    ]
    refused = [name for name, through in let_through(policies, needed).items() if not through]
    assert not refused, f"refused by the NetworkPolicies: {refused}"


def test_nothing_else_gets_in(base: list[Doc], policies: list[Doc]) -> None:
    ranker, worker = pod_of(base, "Deployment"), pod_of(base, "StatefulSet")
    unwanted = [
        ("another namespace -> Milvus", ELSEWHERE, MILVUS, 19530),
        ("another pod -> Milvus", NEIGHBOUR, MILVUS, 19530),
        ("the ranker -> etcd", ranker, ETCD, 2379),
        ("the ranker -> MinIO", ranker, MINIO, 9000),
        ("another namespace -> MinIO", ELSEWHERE, MINIO, 9000),
        ("another namespace -> etcd", ELSEWHERE, ETCD, 2379),
        ("the ranker -> the worker's metrics from outside a rule's port", ranker, worker, 6066),
    ]
    admitted = [name for name, through in let_through(policies, unwanted).items() if through]
    assert not admitted, f"let through: {admitted}"
