"""One Kafka connection for every client: TLS and SASL settings, replication, topic configs."""

from __future__ import annotations

import logging
import ssl
from pathlib import Path

import pytest
from aiokafka.errors import KafkaTimeoutError
from faust.transport.drivers.aiokafka import credentials_to_aiokafka_auth
from pydantic import ValidationError

from storage.kafka import KafkaConnection
from streams import topics
from streams.app import credentials
from streams.settings import WorkerSettings
from streams.topics import DEAD_LETTER, ROLES, WEEK_MS, topic_config


def settings(**env: object) -> WorkerSettings:
    """Settings from ``env`` alone (model_validate reads no environment variables)."""
    return WorkerSettings.model_validate(env)


def test_plaintext_by_default_and_a_bare_address_is_plaintext() -> None:
    assert settings().kafka().client() == {
        "bootstrap_servers": "127.0.0.1:9092",
        "security_protocol": "PLAINTEXT",
    }
    assert KafkaConnection.of("b:1") == KafkaConnection("b:1")
    assert credentials(KafkaConnection("b:1")) is None


def test_sasl_over_tls_reaches_aiokafka_and_faust_alike() -> None:
    kafka = settings(
        kafka_bootstrap="b1:9093,b2:9093",
        kafka_security_protocol="SASL_SSL",
        kafka_sasl_mechanism="SCRAM-SHA-512",
        kafka_sasl_username="mnemo",
        kafka_sasl_password="s3cret",
    ).kafka()
    client = kafka.client()
    assert isinstance(client.pop("ssl_context"), ssl.SSLContext)
    assert client == {
        "bootstrap_servers": "b1:9093,b2:9093",
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "mnemo",
        "sasl_plain_password": "s3cret",
    }
    faust = dict(credentials_to_aiokafka_auth(credentials(kafka)))
    assert isinstance(faust.pop("ssl_context"), ssl.SSLContext)
    assert faust == {k: v for k, v in client.items() if k != "bootstrap_servers"}
    assert "s3cret" not in repr(kafka)
    sasl = {"kafka_sasl_mechanism": "PLAIN", "kafka_sasl_username": "mnemo"}
    given = settings(kafka_security_protocol="SASL_SSL", kafka_sasl_password="s3cret", **sasl)
    assert "s3cret" not in repr(given)


def test_tls_alone_verifies_the_brokers() -> None:
    kafka = settings(kafka_security_protocol="SSL").kafka()
    context = kafka.client()["ssl_context"]
    assert context.verify_mode is ssl.CERT_REQUIRED
    assert credentials_to_aiokafka_auth(credentials(kafka))["security_protocol"] == "SSL"


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"kafka_security_protocol": "SASL_PLAINTEXT"}, "kafka_sasl_mechanism"),
        ({"kafka_security_protocol": "SSL", "kafka_ssl_certfile": "/c.pem"}, "kafka_ssl_keyfile"),
        # given and dropped before: TLS files under SASL_PLAINTEXT sent the password in clear
        (
            {
                "kafka_security_protocol": "SASL_PLAINTEXT",
                "kafka_sasl_mechanism": "PLAIN",
                "kafka_sasl_username": "svc",
                "kafka_sasl_password": "pw",
                "kafka_ssl_cafile": "/ca.pem",
            },
            "kafka_ssl_cafile is given: TLS needs SSL or SASL_SSL",
        ),
        ({"kafka_sasl_username": "svc", "kafka_sasl_password": "pw"}, "SASL needs SASL_SSL"),
    ],
)
def test_incomplete_security_settings_name_what_is_missing(env: dict[str, str], named: str) -> None:
    with pytest.raises(ValueError, match=named):
        settings(**env).kafka()


def test_min_insync_above_the_replication_is_refused_at_start_up() -> None:
    with pytest.raises(ValidationError, match="kafka_min_insync=2 exceeds kafka_replication=1"):
        settings(kafka_min_insync=2)
    assert settings(kafka_replication=3, kafka_min_insync=2).kafka_min_insync == 2


def test_a_replay_must_name_its_own_app_id_collection_and_data_directory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """README's MNEMO_REPLAY=true alone joined the live worker's consumer group and wrote into
    its collection and tables.
    """
    with pytest.raises(ValidationError, match=r"APP_ID \(not 'mnemostream'\), MNEMO_MILVUS_COLL"):
        settings(replay=True)
    with pytest.raises(ValidationError, match=r"own MNEMO_DATA_DIR \(not '/data/worker'\):"):
        # a worker pod's or image's own settings (k8s's config, the Dockerfile's) are the live's
        settings(
            replay=True,
            app_id="replay-1",
            milvus_collection="replay_1",
            data_dir="/data/worker",
            milvus_uri="http://milvus:19530",
        )
    own = {"app_id": "replay-1", "milvus_collection": "replay_1", "data_dir": "var/replay"}
    # make up's Lite file, by the default's name or the absolute path make up hands its processes
    for live in ("var/milvus.db", str(Path("var/milvus.db").resolve()), "/data/milvus.db"):
        with pytest.raises(ValidationError, match=r"own MNEMO_MILVUS_URI \(not '.*milvus.db'\)"):
            settings(replay=True, milvus_uri=live, **own)
    assert settings(replay=True, milvus_uri="http://milvus:19530", **own).replay  # a server
    monkeypatch.setenv("MNEMO_REPLAY", "true")
    monkeypatch.setenv("MNEMO_APP_ID", "replay-1")
    monkeypatch.setenv("MNEMO_MILVUS_COLLECTION", "replay_1")
    monkeypatch.setenv("MNEMO_DATA_DIR", "var/replay")
    monkeypatch.setenv("MNEMO_MILVUS_URI", "var/replay.db")
    assert WorkerSettings().replay  # read from the environment, as python -m streams does


def test_every_topic_is_compressed_with_its_retention_and_min_insync() -> None:
    s = settings(kafka_replication=3, kafka_min_insync=2, log_retention_ms=-1)
    configs = {role: topic_config(s, role) for role in ROLES}
    assert {c["min.insync.replicas"] for c in configs.values()} == {"2"}
    assert {c["compression.type"] for c in configs.values()} == {"zstd"}
    assert configs["memory-writes"]["retention.ms"] == "-1"  # the log is kept: replay needs it
    assert configs["consolidation"]["retention.ms"] == str(WEEK_MS)
    assert configs[DEAD_LETTER]["retention.ms"] == str(s.dead_letter_retention_ms)


@pytest.mark.anyio
async def test_a_broker_that_will_not_describe_the_topics_costs_a_warning_not_the_start(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The check only warns; a broker without DescribeConfigs, or one that timed out, failed
    the worker's start (ensure_topics raised)."""

    class Refusing:
        async def describe_topics(self, names: list[str]) -> list[object]:
            raise KafkaTimeoutError

    with caplog.at_level(logging.WARNING, logger="streams.topics"):
        await topics._warn_of_drifts(Refusing(), settings(), ["memory-writes"])
    assert "topic settings not checked against the broker's: KafkaTimeoutError" in caplog.text
