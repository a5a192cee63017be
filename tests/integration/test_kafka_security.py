"""The whole service on a secured broker, configured once (``MNEMO_KAFKA_*``): every client (the
worker's Faust app and topic admin, the ranker's producer, state view, offsets and audit reader)
authenticates with SASL, or talks TLS to a broker whose certificate a throwaway CA signed (also
with a client certificate, and SASL over TLS); a client without credentials, one that speaks
PLAINTEXT to the TLS port, one trusting another CA and one without its certificate where the broker
asks for one are refused.
"""

from __future__ import annotations

import asyncio
import gc
import socket
import ssl
import subprocess
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from mnemostream import Client
from storage.kafka import KafkaConnection
from tests.integration.harness import Stack
from tests.integration.test_end_to_end import DIM, KEY, e, serve
from tests.integration.test_faults import Broker, running_broker
from tests.integration.test_streams import T0

pytestmark = pytest.mark.integration
SASL = {
    "MNEMO_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
    "MNEMO_KAFKA_SASL_MECHANISM": "PLAIN",
    "MNEMO_KAFKA_SASL_USERNAME": "mnemo",
    "MNEMO_KAFKA_SASL_PASSWORD": "mnemo-secret-1",
}


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    yield from running_broker(tmp_path / "kafka", KAFKA_SASL_PLAIN_USERS="mnemo:mnemo-secret-1")


@pytest.fixture
def server(broker: Broker, milvus_server_uri: str, tmp_path: Path) -> Iterator[str]:
    stack = Stack(broker.bootstrap, milvus_server_uri, tmp_path, ("acme",), dim=DIM)
    yield from serve(stack, tmp_path, **SASL)


def test_the_service_runs_on_a_sasl_broker(broker: Broker, server: str) -> None:
    with Client(server, KEY) as client:
        memory_id = client.remember("Dana keeps bees", embedding=e(0.0, 1.0), at=T0)
        found = client.recall(vector=e(0.0, 1.0), k=1, at=T0, track=False)
        assert [m.memory_id for m in found] == [memory_id]
        assert [h["kind"] for h in client.history(memory_id)][:1] == ["created"]
    assert refused(bootstrap_servers=broker.bootstrap)


def refused(**client: Any) -> bool:
    """Whether an aiokafka producer with these settings fails to start (fetch metadata); it gives
    up by itself after its 3 s request timeout, and is cut off at 30 s in any case.
    """

    async def attempt() -> bool:
        producer = AIOKafkaProducer(request_timeout_ms=3000, **client)
        try:
            await asyncio.wait_for(producer.start(), 30)
        except (KafkaError, TimeoutError, OSError):
            return True
        finally:
            await producer.stop()
        return False

    # A refused connection may be left for the garbage collector by aiokafka; its ResourceWarning
    # is aiokafka's, not the service's, and would fail the session: collect it here, unreported.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        try:
            return asyncio.run(attempt())
        finally:
            gc.collect()


# TLS ---------------------------------------------------------------------------------------------

OPENSSL_CONFIG = """\
[req]
distinguished_name = dn
[dn]
[ca]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
[server]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth, clientAuth
subjectAltName = IP:127.0.0.1, DNS:localhost
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid, issuer
[client]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = clientAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid, issuer
"""


@dataclass(frozen=True)
class Pki:
    """Throwaway PEM files: a CA, the broker's certificate (127.0.0.1 and localhost) and a client
    certificate it signed, and an unrelated CA.
    """

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_ca: Path


def make_pki(directory: Path) -> Pki:
    """:class:`Pki` in ``directory``, made by the ``openssl`` CLI (keys unencrypted, PKCS#8)."""
    directory.mkdir(parents=True, exist_ok=True)
    config = directory / "openssl.cnf"
    config.write_text(OPENSSL_CONFIG)

    def openssl(*args: str | Path) -> None:
        subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True)

    def authority(name: str) -> tuple[Path, Path]:
        cert, key = directory / f"{name}.pem", directory / f"{name}.key"
        openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert,
                "-days", "2", "-subj", f"/CN=mnemostream test {name}", "-config", config,
                "-extensions", "ca")  # fmt: skip
        return cert, key

    def leaf(name: str, ca: tuple[Path, Path], serial: int) -> tuple[Path, Path]:
        cert, key, csr = (directory / f"{name}{ext}" for ext in (".pem", ".key", ".csr"))
        openssl("req", "-new", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", csr,
                "-subj", f"/CN={name}", "-config", config)  # fmt: skip
        openssl("x509", "-req", "-in", csr, "-CA", ca[0], "-CAkey", ca[1], "-set_serial", str(serial),
                "-days", "2", "-out", cert, "-extfile", config, "-extensions", name)  # fmt: skip
        return cert, key

    ca = authority("ca")
    server = leaf("server", ca, 1)
    client = leaf("client", ca, 2)
    return Pki(ca[0], *server, *client, authority("other-ca")[0])


@dataclass(frozen=True)
class TlsCase:
    """One way to secure the broker's port with TLS."""

    name: str
    client_auth: bool = False  # the broker requires a client certificate signed by the CA
    sasl: bool = False  # SASL PLAIN over TLS

    def broker_env(self, pki: Pki) -> dict[str, str]:
        env = {
            "KAFKA_SSL_CERT": str(pki.server_cert),
            "KAFKA_SSL_KEY": str(pki.server_key),
            "KAFKA_SSL_CA": str(pki.ca),
            "KAFKA_SSL_CLIENT_AUTH": "required" if self.client_auth else "none",
        }
        return env | ({"KAFKA_SASL_PLAIN_USERS": "mnemo:mnemo-secret-1"} if self.sasl else {})

    def connection(self, bootstrap: str, pki: Pki) -> KafkaConnection:
        """The settings of the service's clients (as ``MNEMO_KAFKA_*`` gives them)."""
        return KafkaConnection(
            bootstrap,
            security_protocol="SASL_SSL" if self.sasl else "SSL",
            sasl_mechanism="PLAIN" if self.sasl else None,
            sasl_username="mnemo" if self.sasl else None,
            sasl_password="mnemo-secret-1" if self.sasl else None,
            ssl_cafile=str(pki.ca),
            ssl_certfile=str(pki.client_cert) if self.client_auth else None,
            ssl_keyfile=str(pki.client_key) if self.client_auth else None,
        )


def service_env(kafka: KafkaConnection) -> dict[str, str]:
    settings = {
        "MNEMO_KAFKA_SECURITY_PROTOCOL": kafka.security_protocol,
        "MNEMO_KAFKA_SASL_MECHANISM": kafka.sasl_mechanism,
        "MNEMO_KAFKA_SASL_USERNAME": kafka.sasl_username,
        "MNEMO_KAFKA_SASL_PASSWORD": kafka.sasl_password,
        "MNEMO_KAFKA_SSL_CAFILE": kafka.ssl_cafile,
        "MNEMO_KAFKA_SSL_CERTFILE": kafka.ssl_certfile,
        "MNEMO_KAFKA_SSL_KEYFILE": kafka.ssl_keyfile,
    }
    return {name: value for name, value in settings.items() if value is not None}


@pytest.fixture(
    params=[
        TlsCase("tls"),
        TlsCase("mutual-tls", client_auth=True),
        TlsCase("sasl-ssl", sasl=True),
    ],
    ids=lambda case: case.name,
)
def tls_case(request: pytest.FixtureRequest) -> TlsCase:
    case: TlsCase = request.param
    return case


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return make_pki(tmp_path / "pki")


@pytest.fixture
def tls_broker(tls_case: TlsCase, pki: Pki, tmp_path: Path) -> Iterator[Broker]:
    yield from running_broker(tmp_path / "kafka", **tls_case.broker_env(pki))


@pytest.fixture
def tls_server(
    tls_case: TlsCase, tls_broker: Broker, pki: Pki, milvus_server_uri: str, tmp_path: Path
) -> Iterator[str]:
    stack = Stack(tls_broker.bootstrap, milvus_server_uri, tmp_path, ("acme",), dim=DIM)
    yield from serve(stack, tmp_path, **service_env(tls_case.connection(tls_broker.bootstrap, pki)))


def test_the_service_runs_on_a_tls_broker(
    tls_case: TlsCase, tls_broker: Broker, pki: Pki, tls_server: str
) -> None:
    with Client(tls_server, KEY) as client:
        memory_id = client.remember("Dana keeps bees", embedding=e(0.0, 1.0), at=T0)
        found = client.recall(vector=e(0.0, 1.0), k=1, at=T0, track=False)
        assert [m.memory_id for m in found] == [memory_id]  # the worker applied it, over TLS
        assert [h["kind"] for h in client.history(memory_id)][:1] == ["created"]

    bootstrap = tls_broker.bootstrap
    assert ("IP Address", "127.0.0.1") in handshake(bootstrap, pki.ca)["subjectAltName"]
    with pytest.raises(ssl.SSLCertVerificationError):
        handshake(bootstrap, pki.other_ca)

    kafka = tls_case.connection(bootstrap, pki)
    assert not refused(**kafka.client())  # the control: these settings work
    assert refused(bootstrap_servers=bootstrap)  # PLAINTEXT to the TLS port
    wrong_ca = KafkaConnection(**{**vars(kafka), "ssl_cafile": str(pki.other_ca)})
    assert refused(**wrong_ca.client())
    if tls_case.client_auth:
        no_cert = KafkaConnection(**{**vars(kafka), "ssl_certfile": None, "ssl_keyfile": None})
        assert refused(**no_cert.client())


def handshake(bootstrap: str, cafile: Path) -> dict[str, Any]:
    """The broker's certificate after a TLS handshake that verifies it against ``cafile``."""
    host, port = bootstrap.rsplit(":", 1)
    context = ssl.create_default_context(cafile=str(cafile))
    with (
        socket.create_connection((host, int(port)), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname=host) as tls,
    ):
        cert = tls.getpeercert()
    assert cert is not None
    return dict(cert)
