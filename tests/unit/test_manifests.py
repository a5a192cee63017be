"""Offline checks of the deployment files: k8s/, docker-compose.yml and the Dockerfile.

- Core kinds are validated by kubernetes-validate against Kubernetes ``K8S_VERSION``, strict
  (an unknown field fails, as ``kubectl apply`` with server-side field validation does).
- Strimzi and KEDA resources are validated against their CRDs' OpenAPI schemas, vendored in
  ``tests/data/crds`` (source and version in its README), made strict the same way.
- Kustomizations are rendered here, without kustomize: ``resources`` (files and directories),
  ``namespace`` and JSON6902 ``patches`` (add, replace, remove) on one target each. Any other
  kustomization field fails the test, so that nothing is silently left out of the rendering.
- Cross-references that a schema cannot see: every ``MNEMO_*`` name is a settings field of the
  process that reads it and every value parses; ports, probes and scrape annotations agree with the
  settings; Services, PDBs and autoscalers select what exists; the tenants file is mounted where
  ``MNEMO_TENANTS_FILE`` points; KafkaTopics are the app's topics (names, partitions, retention);
  KEDA's consumer group is the Faust app's group id and it never scales past the partitions.
"""

from __future__ import annotations

import copy
import fnmatch
import json
import os
import re
import shlex
import tomllib
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import jsonschema
import kubernetes_validate
import pytest
import yaml

from ranker.__main__ import HTTP_GRACE_S
from ranker.api import create_api
from ranker.service import RecallService
from ranker.settings import RankerSettings
from ranker.warmup import PRELOAD_STOP_S
from storage import MilvusConfig, MilvusStore
from storage.embedding import Hashing
from storage.settings import SharedSettings
from storage.tenants import TenantRegistry
from streams import topics
from streams.app import Services, create_app
from streams.settings import LIVE_DATA_DIRS, LIVE_LITE_FILES, WorkerSettings

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "k8s"
CRDS = ROOT / "tests" / "data" / "crds"
K8S_VERSION = "1.33.0"
KUSTOMIZATIONS = ("base", "kafka", "keda", "overlays/gpu")

#: The trigger metadata the KEDA Kafka scaler reads (kedacore/keda v2.20.2,
#: pkg/scalers/kafka_scaler.go, the ``keda:"name=..."`` tags); the CRD types it as a string map.
KEDA_KAFKA_METADATA = frozenset((
    "bootstrapServers", "consumerGroup", "topic", "partitionLimitation", "lagThreshold",
    "activationLagThreshold", "offsetResetPolicy", "allowIdleConsumers", "excludePersistentLag",
    "scaleToZeroOnInvalidOffset", "limitToPartitionsWithLag", "ensureEvenDistributionOfPartitions",
    "version", "tls", "unsafeSsl", "sasl", "saslTokenProvider", "awsRegion",
))  # fmt: skip

#: Which settings class each ``python -m`` module reads.
SETTINGS_OF: dict[str, tuple[type[SharedSettings], ...]] = {
    "streams": (WorkerSettings,),
    "ranker": (RankerSettings,),
    "server": (WorkerSettings, RankerSettings),
}

Doc = dict[str, Any]


# -- loading and rendering --------------------------------------------------------------------


def load_docs(path: Path) -> list[Doc]:
    return [doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc is not None]


def api_group_version(doc: Doc) -> tuple[str, str]:
    group, _, version = doc["apiVersion"].rpartition("/")
    return group, version


def pointer(path: str) -> list[str]:
    assert path.startswith("/"), path
    return [part.replace("~1", "/").replace("~0", "~") for part in path[1:].split("/")]


def apply_operation(doc: Doc, operation: Doc) -> None:
    """One JSON6902 operation (add, replace, remove), as kustomize applies it."""
    *parents, last = pointer(operation["path"])
    node: Any = doc
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    op = operation["op"]
    if isinstance(node, list):
        if op == "add":
            node.insert(len(node) if last == "-" else int(last), operation["value"])
        elif op == "replace":
            node[int(last)] = operation["value"]
        else:
            assert op == "remove", operation
            del node[int(last)]
        return
    if op == "add":
        node[last] = operation["value"]
    elif op == "replace":
        assert last in node, f"replace of a missing {operation['path']}"
        node[last] = operation["value"]
    else:
        assert op == "remove", operation
        del node[last]


def matches(doc: Doc, target: Doc) -> bool:
    assert set(target) <= {"group", "version", "kind", "name"}, target
    group, version = api_group_version(doc)
    actual = {"group": group, "version": version, "kind": doc["kind"]}
    actual["name"] = doc["metadata"]["name"]
    return all(actual[key] == value for key, value in target.items())


def render(directory: Path) -> list[Doc]:
    """The resources ``kustomize build directory`` makes, for the fields this module supports."""
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text(encoding="utf-8"))
    unsupported = set(kustomization) - {"apiVersion", "kind", "namespace", "resources", "patches"}
    assert not unsupported, f"{directory}: fields this test cannot render: {unsupported}"
    docs: list[Doc] = []
    for entry in kustomization.get("resources", []):
        path = (directory / entry).resolve()
        docs.extend(render(path) if path.is_dir() else load_docs(path))
    docs = copy.deepcopy(docs)
    namespace = kustomization.get("namespace")
    for doc in docs:
        if namespace is None:
            continue
        if doc["kind"] == "Namespace":
            assert doc["metadata"]["name"] == namespace  # kustomize would rename it
        else:
            doc["metadata"]["namespace"] = namespace
    for patch in kustomization.get("patches", []):
        assert set(patch) == {"target", "patch"}, "inline JSON6902 patches with a target only"
        operations = yaml.safe_load(patch["patch"])
        assert isinstance(operations, list), "a strategic-merge patch: not rendered here"
        (target,) = [doc for doc in docs if matches(doc, patch["target"])]
        for operation in operations:
            apply_operation(target, operation)
    return docs


def rendered(name: str) -> list[Doc]:
    return render(K8S / name)


def one(docs: list[Doc], kind: str, name: str | None = None) -> Doc:
    (found,) = [d for d in docs if d["kind"] == kind and name in (None, d["metadata"]["name"])]
    return found


# -- schemas ------------------------------------------------------------------------------------


def strict(schema: Any) -> Any:
    """The schema with unknown fields rejected wherever the CRD does not keep them."""
    if isinstance(schema, list):
        return [strict(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: strict(value) for key, value in schema.items()}
    keeps_unknown = schema.get("x-kubernetes-preserve-unknown-fields") is True
    if "properties" in schema and "additionalProperties" not in schema and not keeps_unknown:
        out["additionalProperties"] = False
    return out


def crd_schemas() -> dict[tuple[str, str], Any]:
    schemas = {}
    for path in sorted(CRDS.glob("*.json")):
        vendored = json.loads(path.read_text(encoding="utf-8"))
        api_version = f"{vendored['group']}/{vendored['version']}"
        schemas[api_version, vendored["kind"]] = strict(vendored["schema"])
    return schemas


CRD_SCHEMAS = crd_schemas()


def validation_errors(doc: Doc) -> list[str]:
    """Why ``doc`` is invalid (empty when it is valid)."""
    schema = CRD_SCHEMAS.get((doc["apiVersion"], doc["kind"]))
    if schema is not None:
        validator = jsonschema.Draft202012Validator(schema)
        return [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(doc)]
    try:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    except kubernetes_validate.ValidationError as exc:
        return [f"{list(exc.absolute_path)}: {exc.message}"]
    except kubernetes_validate.SchemaNotFoundError as exc:
        return [exc.message]
    return []


# -- containers and their settings ------------------------------------------------------------


def workloads(docs: list[Doc]) -> list[Doc]:
    return [d for d in docs if d["kind"] in {"Deployment", "StatefulSet"}]


def containers(docs: list[Doc]) -> Iterator[tuple[Doc, Doc]]:
    for workload in workloads(docs):
        for container in workload["spec"]["template"]["spec"]["containers"]:
            yield workload, container


def module_of(command: list[str]) -> str:
    python, flag, module = command
    assert (python, flag) == ("python", "-m"), command
    return module


def container_env(docs: list[Doc], container: Doc) -> dict[str, str]:
    """The variables a container starts with: its ConfigMaps' data, then its own ``env``
    (a value from a Secret is left out: the Secret is the operator's, and optional).
    """
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        assert set(source) == {"configMapRef"}, source
        env.update(one(docs, "ConfigMap", source["configMapRef"]["name"])["data"])
    for variable in container.get("env", []):
        if "valueFrom" in variable:
            assert set(variable["valueFrom"]) == {"secretKeyRef"}, variable
            assert variable["valueFrom"]["secretKeyRef"]["optional"] is True, variable
            continue
        assert set(variable) == {"name", "value"}, variable
        env[variable["name"]] = variable["value"]
    return env


def env_names(cls: type[SharedSettings]) -> set[str]:
    prefix = str(cls.model_config.get("env_prefix", "")).upper()
    return {prefix + name.upper() for name in cls.model_fields}


SettingsFor = Callable[[type[SharedSettings], dict[str, str]], Any]


@pytest.fixture
def settings_for(monkeypatch: pytest.MonkeyPatch) -> SettingsFor:
    """Build a settings class from exactly the given variables, as the process would."""

    def build(cls: type[SharedSettings], env: dict[str, str]) -> Any:
        for name in list(os.environ):
            if name.upper().startswith("MNEMO_"):
                monkeypatch.delenv(name)
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        return cls()

    return build


def named_port(container: Doc, name: str) -> int:
    (port,) = [p["containerPort"] for p in container.get("ports", []) if p["name"] == name]
    return int(port)


PROBES = ("startupProbe", "readinessProbe", "livenessProbe")


def api_paths() -> set[str]:
    """The paths the ranker's app serves (built without I/O: nothing is connected)."""
    registry = TenantRegistry.open_to(["acme"])
    service = RecallService(MilvusStore(MilvusConfig("unused.db", dim=8)), Hashing(8), _no_send)
    return {str(getattr(route, "path", "")) for route in create_api(service, registry).routes}


async def _no_send(role: str, key: bytes, value: bytes) -> Awaitable[object]:
    raise AssertionError(role)


def probe_ports(container: Doc) -> list[str | int]:
    return [
        probe[kind]["port"]
        for key in ("startupProbe", "readinessProbe", "livenessProbe")
        if (probe := container.get(key)) is not None
        for kind in ("httpGet", "tcpSocket")
        if kind in probe
    ]


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in selector.items())


def compose() -> Doc:
    doc: Doc = yaml.safe_load((ROOT / "docker-compose.yml").read_text(encoding="utf-8"))
    return doc


def secret_file(docs: list[Doc], secret_name: str, key: str) -> str:
    secret = one(docs, "Secret", secret_name)
    text: str = secret["stringData"][key]
    return text


# -- the files parse, every resource is rendered and valid -------------------------------------


def test_every_manifest_parses_and_every_resource_is_applied() -> None:
    listed: set[Path] = set()
    for name in KUSTOMIZATIONS:
        kustomization = yaml.safe_load((K8S / name / "kustomization.yaml").read_text())
        for entry in kustomization["resources"]:
            listed.add((K8S / name / entry).resolve())
    values = K8S / "milvus" / "values.yaml"
    assert isinstance(yaml.safe_load(values.read_text()), dict)
    files = sorted(K8S.rglob("*.yaml"))
    assert len(files) >= 10
    for path in files:
        docs = load_docs(path)
        assert docs, f"{path}: empty"
        if path.name == "kustomization.yaml" or path == values:
            continue
        assert path.resolve() in listed, f"{path}: in no kustomization, so never applied or checked"
        for doc in docs:
            assert {"apiVersion", "kind", "metadata"} <= set(doc), f"{path}: {doc}"
            assert doc["metadata"]["name"], path
    assert set(compose()["services"]) == {"kafka", "milvus", "worker", "ranker"}


@pytest.mark.parametrize("name", KUSTOMIZATIONS)
def test_rendered_resources_are_valid(name: str) -> None:
    docs = rendered(name)
    assert docs
    keys = [(d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"]) for d in docs]
    assert len(keys) == len(set(keys)), f"duplicate resources in {name}: {keys}"
    for doc in docs:
        assert validation_errors(doc) == [], f"{name}: {doc['kind']} {doc['metadata']['name']}"
        if doc["kind"] != "Namespace":
            assert doc["metadata"]["namespace"] == "mnemostream"


def test_validation_is_strict() -> None:
    """A misspelt field fails, in core kinds and in custom resources alike."""
    base, kafka, keda = rendered("base"), rendered("kafka"), rendered("keda")
    samples = [
        (one(base, "Deployment"), ["spec", "template", "spec"], "enableServiceLink"),
        (one(base, "StatefulSet"), ["spec"], "volumeClaimTemplate"),
        (one(kafka, "KafkaTopic", "memory-writes"), ["spec"], "partition"),
        (one(kafka, "Kafka"), ["spec", "kafka"], "listener"),
        (one(keda, "ScaledObject"), ["spec"], "maxReplicas"),
    ]
    for doc, path, field in samples:
        bad = copy.deepcopy(doc)
        node = bad
        for part in path:
            node = node[part]
        node[field] = 1
        assert field in " ".join(validation_errors(bad)), f"{doc['kind']}: {field} passed"
    topic = copy.deepcopy(one(kafka, "KafkaTopic", "memory-writes"))
    topic["spec"]["partitions"] = 0
    assert validation_errors(topic)


def test_crd_schemas_are_the_pinned_versions() -> None:
    assert set(CRD_SCHEMAS) == {
        ("kafka.strimzi.io/v1beta2", "Kafka"),
        ("kafka.strimzi.io/v1beta2", "KafkaNodePool"),
        ("kafka.strimzi.io/v1beta2", "KafkaTopic"),
        ("keda.sh/v1alpha1", "ScaledObject"),
    }
    custom = {(d["apiVersion"], d["kind"]) for n in KUSTOMIZATIONS for d in rendered(n)}
    groups = {key: key[0].split("/")[0] for key in custom}  # Kubernetes' own end in .k8s.io
    crds = {key for key, group in groups.items() if "." in group and not group.endswith(".k8s.io")}
    assert crds <= set(CRD_SCHEMAS)


# -- settings: names, values, ports ------------------------------------------------------------


def test_mnemo_variables_are_settings_fields(settings_for: SettingsFor) -> None:
    every = env_names(WorkerSettings) | env_names(RankerSettings)
    docs = rendered("base")
    for config in (d for d in docs if d["kind"] == "ConfigMap"):
        unknown = {n for n in config["data"] if n.startswith("MNEMO_")} - every
        assert not unknown, f"ConfigMap {config['metadata']['name']}: {unknown}"
    seen = 0
    for workload, container in containers(docs):
        classes = SETTINGS_OF[module_of(container["command"])]
        own = {v["name"] for v in container.get("env", []) if v["name"].startswith("MNEMO_")}
        fields = set().union(*(env_names(cls) for cls in classes))
        assert own <= fields, f"{workload['metadata']['name']}: {own - fields} read by no setting"
        env = container_env(docs, container)
        for cls in classes:
            settings_for(cls, env)  # every value parses
        seen += 1
    assert seen == 2
    for name, service in compose()["services"].items():
        env = service.get("environment", {})
        if "build" not in service:  # kafka, milvus
            assert not any(n.startswith("MNEMO_") for n in env), name
            continue
        classes = SETTINGS_OF[module_of(service["command"])]
        fields = set().union(*(env_names(cls) for cls in classes))
        assert set(env) <= fields, f"compose {name}: {set(env) - fields}"
        for cls in classes:
            settings_for(cls, env)
    dockerfile_env = set(re.findall(r"\b(MNEMO_[A-Z_]+)=", (ROOT / "Dockerfile").read_text()))
    assert dockerfile_env
    assert dockerfile_env <= every


def test_ports_probes_and_scrape_annotations_follow_the_settings(
    settings_for: SettingsFor,
) -> None:
    docs = rendered("base")
    worker = one(docs, "StatefulSet", "mnemostream-worker")
    ranker = one(docs, "Deployment", "mnemostream-ranker")
    (worker_container,) = worker["spec"]["template"]["spec"]["containers"]
    (ranker_container,) = ranker["spec"]["template"]["spec"]["containers"]
    assert module_of(worker_container["command"]) == "streams"
    assert module_of(ranker_container["command"]) == "ranker"
    ws = settings_for(WorkerSettings, container_env(docs, worker_container))
    rs = settings_for(RankerSettings, container_env(docs, ranker_container))
    assert ws.metrics_host == "0.0.0.0"  # the default, loopback, cannot be scraped
    assert rs.host == "0.0.0.0"
    assert ws.metrics_port == named_port(worker_container, "metrics") == 9102
    assert rs.port == named_port(ranker_container, "http") == 8080
    # the metrics apart from the API: they count every tenant's traffic together
    assert rs.ranker_metrics_port == named_port(ranker_container, "metrics") == 9103
    assert probe_ports(worker_container) == ["metrics"]
    assert worker_container["readinessProbe"]["tcpSocket"]["port"] == "metrics"
    assert set(probe_ports(ranker_container)) == {"http"}
    paths = {key: ranker_container[key]["httpGet"]["path"] for key in PROBES}
    assert paths == {
        "startupProbe": "/healthz",
        "readinessProbe": "/readyz",
        "livenessProbe": "/healthz",
    }
    assert set(paths.values()) <= api_paths()
    for workload, settings_port in ((worker, ws.metrics_port), (ranker, rs.ranker_metrics_port)):
        annotations = workload["spec"]["template"]["metadata"]["annotations"]
        assert annotations["prometheus.io/scrape"] == "true"
        assert annotations["prometheus.io/port"] == str(settings_port)
        assert annotations["prometheus.io/path"] == "/metrics"
        spec = workload["spec"]
        assert "replicas" not in spec, "the autoscaler owns replicas: an apply would reset them"
        assert spec["template"]["spec"]["enableServiceLinks"] is False  # MNEMO_* collisions
    # the pod serves on while it leaves the Service's endpoints (the server closes its socket at
    # SIGTERM), then finishes its requests and stops the fill within the grace period
    sleep, seconds = ranker_container["lifecycle"]["preStop"]["exec"]["command"]
    assert sleep == "sleep"  # coreutils' (python:3.11-slim has it), not the 1.30+ sleep action
    pause = int(seconds)
    grace = ranker["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert pause >= 5
    assert pause + HTTP_GRACE_S + PRELOAD_STOP_S < grace


def test_worker_tables_live_on_the_claimed_volume(settings_for: SettingsFor) -> None:
    docs = rendered("base")
    worker = one(docs, "StatefulSet")
    (container,) = worker["spec"]["template"]["spec"]["containers"]
    settings = settings_for(WorkerSettings, container_env(docs, container))
    assert settings.store == "rocksdb"
    claims = {t["metadata"]["name"] for t in worker["spec"]["volumeClaimTemplates"]}
    mounts = [m for m in container["volumeMounts"] if m["name"] in claims]
    assert any(Path(settings.data_dir).is_relative_to(m["mountPath"]) for m in mounts)
    headless = one(docs, "Service", worker["spec"]["serviceName"])
    assert headless["spec"]["clusterIP"] == "None"


def test_tenants_file_is_mounted_from_the_secret(settings_for: SettingsFor) -> None:
    docs = rendered("base")
    seen = 0
    for workload, container in containers(docs):
        env = container_env(docs, container)
        cls = SETTINGS_OF[module_of(container["command"])][0]
        tenants_file = Path(settings_for(cls, env).tenants_file)
        (mount,) = [
            m for m in container["volumeMounts"] if Path(m["mountPath"]) == tenants_file.parent
        ]
        assert mount.get("readOnly") is True
        volumes = workload["spec"]["template"]["spec"]["volumes"]
        (volume,) = [v for v in volumes if v["name"] == mount["name"]]
        (item,) = [i for i in volume["secret"]["items"] if i["path"] == tenants_file.name]
        text = secret_file(docs, volume["secret"]["secretName"], item["key"])
        registry = TenantRegistry.of(json.loads(text))
        demo = registry.get("demo")
        assert demo is not None
        assert demo.api_key_hashes
        seen += 1
    assert seen == 2
    for name in ("worker", "ranker"):
        service = compose()["services"][name]
        target = service["environment"]["MNEMO_TENANTS_FILE"]
        (volume,) = [v for v in service["volumes"] if v.split(":")[1] == target]
        source = ROOT / volume.split(":")[0]
        assert TenantRegistry.load(source).get("demo") is not None


def test_services_pdbs_and_autoscalers_select_what_exists() -> None:
    for name in ("base", "overlays/gpu"):
        docs = rendered(name)
        by_name = {w["metadata"]["name"]: w for w in workloads(docs)}
        pods = {n: w["spec"]["template"]["metadata"]["labels"] for n, w in by_name.items()}
        for workload_name, workload in by_name.items():
            assert selects(workload["spec"]["selector"]["matchLabels"], pods[workload_name])
        for service in (d for d in docs if d["kind"] == "Service"):
            selector = service["spec"]["selector"]
            (target,) = [n for n, labels in pods.items() if selects(selector, labels)]
            containers = by_name[target]["spec"]["template"]["spec"]["containers"]
            ports = {p["name"] for c in containers for p in c["ports"]}
            assert {p["targetPort"] for p in service["spec"]["ports"]} <= ports
        for pdb in (d for d in docs if d["kind"] == "PodDisruptionBudget"):
            selector = pdb["spec"]["selector"]["matchLabels"]
            assert [n for n, labels in pods.items() if selects(selector, labels)] == [
                pdb["metadata"]["name"]
            ]
        hpa = one(docs, "HorizontalPodAutoscaler")
        ref = hpa["spec"]["scaleTargetRef"]
        assert (ref["apiVersion"], ref["kind"]) == ("apps/v1", "Deployment")
        assert by_name[ref["name"]]["kind"] == "Deployment"
        assert 1 <= hpa["spec"]["minReplicas"] <= hpa["spec"]["maxReplicas"]
        assert hpa["spec"]["metrics"][0]["resource"]["name"] == "cpu"
        (container,) = by_name[ref["name"]]["spec"]["template"]["spec"]["containers"]
        assert container["resources"]["requests"]["cpu"]  # utilisation is relative to requests
    docs = rendered("base")
    ranker_service = one(docs, "Service", "mnemostream-ranker")
    ranker_pods = one(docs, "Deployment", "mnemostream-ranker")["spec"]["template"]["metadata"]
    assert selects(ranker_service["spec"]["selector"], ranker_pods["labels"])
    assert not selects(ranker_service["spec"]["selector"], pods_of(docs, "StatefulSet"))


def pods_of(docs: list[Doc], kind: str) -> dict[str, str]:
    labels: dict[str, str] = one(docs, kind)["spec"]["template"]["metadata"]["labels"]
    return labels


# -- Kafka, KEDA, Milvus -------------------------------------------------------------------------


def worker_settings(settings_for: SettingsFor, docs: list[Doc], **overrides: str) -> Any:
    """The worker's settings as its pod in ``docs`` (the base) would read them."""
    (container,) = one(docs, "StatefulSet", "mnemostream-worker")["spec"]["template"]["spec"][
        "containers"
    ]
    return settings_for(WorkerSettings, {**container_env(docs, container), **overrides})


def plain_listener(kafka: Doc) -> Doc:
    plain: list[Doc] = [
        item
        for item in kafka["spec"]["kafka"]["listeners"]
        if item["type"] == "internal" and item["tls"] is False
    ]
    (listener,) = plain
    return listener


def test_no_broker_creates_a_topic_on_its_own() -> None:
    """The worker creates its topics with their partitions and configs (writes and accesses share
    a key's partition); a produce before it, from a ranker started alongside, must not create one
    with the broker's defaults. Every broker the project runs says so.
    """
    kafka = one(rendered("kafka"), "Kafka")
    assert kafka["spec"]["kafka"]["config"]["auto.create.topics.enable"] is False
    env = compose()["services"]["kafka"]["environment"]
    assert env["KAFKA_AUTO_CREATE_TOPICS_ENABLE"] == "false"
    local = (ROOT / "scripts" / "kafka.sh").read_text(encoding="utf-8")
    assert "auto.create.topics.enable=false" in local.splitlines()


def test_kafka_topics_are_the_apps_topics(settings_for: SettingsFor) -> None:
    base, docs = rendered("base"), rendered("kafka")
    settings = worker_settings(settings_for, base)
    kafka = one(docs, "Kafka")
    cluster = kafka["metadata"]["name"]
    kafka_topics = [d for d in docs if d["kind"] == "KafkaTopic"]
    names = {t["spec"]["topicName"] for t in kafka_topics}  # any prefix, even with dots
    assert names == {settings.topic(role) for role in topics.ROLES}
    brokers = sum(
        pool["spec"]["replicas"]
        for pool in docs
        if pool["kind"] == "KafkaNodePool" and "broker" in pool["spec"]["roles"]
    )
    min_isr = int(kafka["spec"]["kafka"]["config"]["min.insync.replicas"])
    for topic in kafka_topics:
        name = topic["spec"]["topicName"]
        assert topic["metadata"]["labels"]["strimzi.io/cluster"] == cluster
        # writes and access share a key's partition: the same count everywhere, the worker's
        assert topic["spec"]["partitions"] == settings.partitions, name
        assert min_isr < topic["spec"]["replicas"] <= brokers, name
        role = name.removeprefix(settings.topic_prefix)
        # the configuration the worker would create it with, replicas included
        given = {k: str(v) for k, v in topic["spec"].get("config", {}).items()}
        assert given == topics.topic_config(settings, role), name
        assert topic["spec"]["replicas"] == settings.kafka_replication, name
        if role in topics._REPLAYED:
            assert settings.log_retention_ms == -1, name  # the log is kept: replay needs it
    # changelogs get the same replicas; acks=all writes need the cluster's min.insync in sync
    assert settings.kafka_min_insync == min_isr < settings.kafka_replication <= brokers
    for pool in (d for d in docs if d["kind"] == "KafkaNodePool"):
        assert pool["metadata"]["labels"]["strimzi.io/cluster"] == cluster
    assert "controller" in {
        role for d in docs if d["kind"] == "KafkaNodePool" for role in d["spec"]["roles"]
    }
    assert "topicOperator" in kafka["spec"]["entityOperator"]  # it reconciles the KafkaTopics
    # the pods reach Strimzi's bootstrap Service in their own namespace
    assert settings.kafka_bootstrap == f"{cluster}-kafka-bootstrap:{plain_listener(kafka)['port']}"
    assert {d["metadata"]["namespace"] for d in docs} == {
        one(base, "Namespace")["metadata"]["name"]
    }


def test_network_policies_deny_by_default_and_open_what_the_pods_serve() -> None:
    base = rendered("base")
    policies = {d["metadata"]["name"]: d for d in base if d["kind"] == "NetworkPolicy"}
    deny = policies.pop("default-deny-ingress")["spec"]
    assert (deny["podSelector"], deny["policyTypes"], deny.get("ingress")) == (
        {},
        ["Ingress"],
        None,
    )
    milvus = policies.pop("milvus-from-mnemostream")["spec"]
    assert [p["port"] for rule in milvus["ingress"] for p in rule["ports"]] == [19530]
    (peer,) = milvus["ingress"][0]["from"]
    app_pods = [w["spec"]["template"]["metadata"]["labels"] for w in workloads(base)]
    assert all(peer["podSelector"]["matchLabels"].items() <= pod.items() for pod in app_pods)
    # the Milvus release's own pods (tests/unit/test_network_policy.py evaluates them)
    for name in ("milvus-internal", "milvus-etcd", "milvus-minio"):
        del policies[name]
    for name, policy in policies.items():  # the ranker's and the worker's
        wanted = policy["spec"]["podSelector"]["matchLabels"]
        (workload,) = [
            w
            for w in workloads(base)
            if wanted.items() <= w["spec"]["template"]["metadata"]["labels"].items()
        ]
        served = {
            port["name"]
            for container in workload["spec"]["template"]["spec"]["containers"]
            for port in container.get("ports", [])
        }
        opened = {p["port"] for rule in policy["spec"]["ingress"] for p in rule["ports"]}
        assert opened <= served, name


def test_keda_scales_the_worker_on_the_faust_group(
    settings_for: SettingsFor, tmp_path: Path
) -> None:
    base, kafka_docs, docs = rendered("base"), rendered("kafka"), rendered("keda")
    tenants = tmp_path / "tenants.json"
    tenants.write_text(secret_file(base, "mnemostream-tenants", "tenants.json"))
    settings = worker_settings(settings_for, base, MNEMO_TENANTS_FILE=str(tenants))
    app = create_app(
        settings, Services(MilvusStore(settings.milvus()), Hashing(settings.embedding_dim))
    )
    group_id = app.conf.id  # Faust's consumer group (aiokafka driver: group_id=conf.id)
    scaled = one(docs, "ScaledObject")
    ref = scaled["spec"]["scaleTargetRef"]
    assert (ref["apiVersion"], ref["kind"]) == ("apps/v1", "StatefulSet")  # scale subresource
    one(base, "StatefulSet", ref["name"])
    assert scaled["metadata"]["namespace"] == one(base, "StatefulSet")["metadata"]["namespace"]
    kafka = one(kafka_docs, "Kafka")
    bootstrap = (
        f"{kafka['metadata']['name']}-kafka-bootstrap.{kafka['metadata']['namespace']}.svc"
        f":{plain_listener(kafka)['port']}"
    )
    partitions = {
        t["spec"]["topicName"]: t["spec"]["partitions"]
        for t in kafka_docs
        if t["kind"] == "KafkaTopic"
    }
    consumed = {settings.topic(r) for r in (topics.WRITES, topics.ACCESS, topics.CONSOLIDATION)}
    triggers = scaled["spec"]["triggers"]
    assert {t["metadata"]["topic"] for t in triggers} == {
        settings.topic(topics.WRITES),
        settings.topic(topics.ACCESS),
    }
    for trigger in triggers:
        meta = trigger["metadata"]
        assert trigger["type"] == "kafka"
        assert set(meta) <= KEDA_KAFKA_METADATA, set(meta) - KEDA_KAFKA_METADATA
        assert all(isinstance(value, str) for value in meta.values())
        assert meta["consumerGroup"] == group_id == settings.app_id
        assert meta["offsetResetPolicy"] == app.conf.consumer_auto_offset_reset
        assert meta["bootstrapServers"] == bootstrap  # KEDA runs in its own namespace
        assert meta["topic"] in consumed
        assert scaled["spec"]["maxReplicaCount"] <= partitions[meta["topic"]]
        assert int(meta["lagThreshold"]) > 0
    assert 1 <= scaled["spec"]["minReplicaCount"] <= scaled["spec"]["maxReplicaCount"]
    assert scaled["spec"]["maxReplicaCount"] <= settings.partitions


def test_milvus_values_serve_the_configured_uri(settings_for: SettingsFor) -> None:
    values_path = K8S / "milvus" / "values.yaml"
    values = yaml.safe_load(values_path.read_text())
    settings = worker_settings(settings_for, rendered("base"))
    uri = urlparse(settings.milvus_uri)
    assert uri.scheme == "http"
    assert uri.port == values["service"]["port"]
    # the Service is named after the Helm release (the chart's fullname when it contains "milvus")
    assert f"helm upgrade --install {uri.hostname} zilliztech/milvus" in values_path.read_text()
    assert values["cluster"]["enabled"] is False
    assert values["pulsarv3"]["enabled"] is False


def test_gpu_overlay_changes_only_the_ranker() -> None:
    base, gpu = rendered("base"), rendered("overlays/gpu")
    changed = {
        ("Deployment", "mnemostream-ranker"),
        ("HorizontalPodAutoscaler", "mnemostream-ranker"),
    }

    def key(doc: Doc) -> tuple[str, str]:
        return doc["kind"], doc["metadata"]["name"]

    assert sorted(map(key, base)) == sorted(map(key, gpu))
    for doc in gpu:
        if key(doc) not in changed:
            assert doc == one(base, doc["kind"], doc["metadata"]["name"]), key(doc)
    (cpu_ranker,) = one(base, "Deployment")["spec"]["template"]["spec"]["containers"]
    pod = one(gpu, "Deployment")["spec"]["template"]["spec"]
    (ranker,) = pod["containers"]
    assert "nvidia.com/gpu" not in cpu_ranker["resources"].get("limits", {})
    assert int(ranker["resources"]["limits"]["nvidia.com/gpu"]) == 1
    # a name of its own: kustomize's images entry matches a name whatever its tag, so an entry
    # for the CPU image must not also set the GPU pods' image
    name, tag = cpu_ranker["image"].split(":")
    assert ranker["image"] == f"{name}-gpu:{tag}"
    assert pod["nodeSelector"]
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod[
        "tolerations"
    ]
    (worker,) = one(gpu, "StatefulSet")["spec"]["template"]["spec"]["containers"]
    assert worker["image"] == cpu_ranker["image"]
    assert (
        one(gpu, "HorizontalPodAutoscaler")["spec"]["maxReplicas"]
        < one(base, "HorizontalPodAutoscaler")["spec"]["maxReplicas"]
    )


# -- docker-compose.yml and the Dockerfile --------------------------------------------------------


def test_compose_wires_the_containers(settings_for: SettingsFor) -> None:
    services = compose()["services"]
    kafka_env = services["kafka"]["environment"]
    advertised = dict(
        reversed(item.split("://")) for item in kafka_env["KAFKA_ADVERTISED_LISTENERS"].split(",")
    )
    listeners = dict(item.split("://") for item in kafka_env["KAFKA_LISTENERS"].split(","))
    milvus_ports = {int(p.split(":")[1]) for p in services["milvus"]["ports"]}
    # one Milvus version for compose and Helm (the tests' server is the PyPI 2.3.5 build)
    helm = yaml.safe_load((K8S / "milvus" / "values.yaml").read_text())
    assert services["milvus"]["image"] == f"milvusdb/milvus:{helm['image']['all']['tag']}"
    images = set()
    for name in ("worker", "ranker"):
        service = services[name]
        assert service["build"] == "."
        images.add(service["image"])
        module = module_of(service["command"])
        assert module == {"worker": "streams", "ranker": "ranker"}[name]
        (cls,) = SETTINGS_OF[module]
        settings = settings_for(cls, service["environment"])
        # containers reach Kafka on the listener advertised under the kafka service's name
        listener = advertised[settings.kafka_bootstrap]
        assert listeners[listener].endswith(":" + settings.kafka_bootstrap.split(":")[1])
        uri = urlparse(settings.milvus_uri)
        assert uri.hostname == "milvus"
        assert uri.port in milvus_ports
        assert set(service["depends_on"]) == {"kafka", "milvus"}
        assert all(services[d].get("healthcheck") for d in service["depends_on"])
        published = {int(p.split(":")[1]) for p in service["ports"]}
        if module == "streams":
            assert settings.metrics_host == "0.0.0.0"
            assert published == {settings.metrics_port}
            volumes = [v.split(":") for v in service["volumes"]]
            assert any(
                settings.data_dir.is_relative_to(target)
                for source, target, *_ in volumes
                if source in compose()["volumes"]
            )
        else:
            assert settings.host == "0.0.0.0"
            # every tenant's traffic counted together: not on the port tenants reach
            assert settings.ranker_metrics_port not in (0, settings.port)
            assert published == {settings.port, settings.ranker_metrics_port}
    assert len(images) == 1
    # SIGKILL comes as late as in k8s (Docker's default was 10 s, mid-flush or mid-request)
    pods = {
        module_of(c["command"]): w["spec"]["template"]["spec"]
        for w, c in containers(rendered("base"))
    }
    for name, module in (("worker", "streams"), ("ranker", "ranker")):
        grace = int(services[name]["stop_grace_period"].removesuffix("s"))
        assert grace == pods[module].get("terminationGracePeriodSeconds", 30), name
    assert int(services["ranker"]["stop_grace_period"][:-1]) > HTTP_GRACE_S + PRELOAD_STOP_S
    host_listener = advertised["localhost:9092"]
    assert "9092:" + listeners[host_listener].rsplit(":", 1)[1] in services["kafka"]["ports"]


def dockerfile_lines() -> list[str]:
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    return [
        line.strip()
        for line in text.splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]


def lock_pins(path: Path) -> dict[str, str]:
    pins = {}
    for line in path.read_text().splitlines():
        if "==" in line and not line.startswith(("#", " ")):
            name, version = line.split("==")
            pins[name.strip().lower()] = version.strip()
    return pins


def test_dockerfile_builds_what_the_manifests_run() -> None:
    lines = dockerfile_lines()
    args = {m[1]: m[2] for line in lines if (m := re.match(r"ARG (\w+)=(\S+)", line))}
    assert args["PYTHON_IMAGE"].startswith("python:3.11-slim")
    assert args["VARIANT"] == "cpu"
    stages = {m[1] for line in lines if (m := re.match(r"FROM \S+ AS (\S+)", line))}
    assert {"deps-cpu", "deps-gpu"} <= stages
    assert lines[-1] == 'CMD ["python", "-m", "ranker"]'
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    images = {c["image"] for _, c in containers(rendered("base"))}
    images |= {compose()["services"][name]["image"] for name in ("worker", "ranker")}
    assert images == {f"mnemostream:{version}"}
    (user,) = [line.split()[1] for line in lines if line.startswith("USER ")]
    uid = int(user.split(":")[0])
    env = dict(
        item.split("=", 1)
        for line in lines
        if line.startswith("ENV ")
        for item in shlex.split(line)[1:]
    )
    # what the worker writes goes to the volume its user owns (var/ is under the root-owned /app:
    # python -m server with the default Lite file failed); a replay refuses both as the live's
    assert env["MNEMO_DATA_DIR"] in LIVE_DATA_DIRS
    assert env["MNEMO_MILVUS_URI"] in LIVE_LITE_FILES
    assert all(env[name].startswith("/data/") for name in ("MNEMO_DATA_DIR", "MNEMO_MILVUS_URI"))
    for workload in workloads(rendered("base")):
        context = workload["spec"]["template"]["spec"]["securityContext"]
        assert context["runAsNonRoot"] is True
        assert context["runAsUser"] == uid
    # every package that pyproject.toml ships is copied before `pip install --no-deps .`
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = project["tool"]["setuptools"]["packages"]["find"]["include"]
    packages = {
        p.name
        for p in ROOT.iterdir()
        if (p / "__init__.py").exists() and any(fnmatch.fnmatch(p.name, pat) for pat in patterns)
    }
    copied = {shlex.split(line)[1].rstrip("/") for line in lines if line.startswith("COPY ")}
    assert packages <= copied
    assert project["project"]["readme"] in copied
    assert any("pip install --no-deps . ./sdk" in line for line in lines)  # `mnemo load` uses it
    assert "sdk" in copied
    # the GPU image swaps faiss-cpu for the same FAISS with GPU support, other pins unchanged
    lock = lock_pins(ROOT / "requirements" / "lock.txt")
    gpu = lock_pins(ROOT / "requirements" / "gpu.txt")
    assert gpu["faiss-gpu"] == lock["faiss-cpu"]
    assert "faiss-cpu" not in gpu
    assert "torch" not in gpu
    assert all(lock[name] == version for name, version in gpu.items() if name in lock)
    assert any(
        "pip uninstall -y faiss-cpu" in line and "requirements/gpu.txt" in line for line in lines
    )
    assert "torch" in lock
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert {".venv", "var", ".git"} <= set(ignored)
