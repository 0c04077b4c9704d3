"""The REST API served over real TLS with Kafka Connect's keys, certificates made in each test:
Connect's JAAS and users files unchanged, read-only callers, mutual TLS, bearer tokens from a local
JWKS, a certificate replaced while the server runs, the audit line of every change, and no password
or token in any log line. The worker's runners are faked (no broker is needed to serve the API)."""

from __future__ import annotations

import asyncio
import datetime
import logging
import os
import ssl
import time
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest

from mm2py.config.errors import ConfigError
from mm2py.kafka_local.security import _ca
from mm2py.rest_api.security.settings import BASIC_AUTH_EXTENSION, rest_settings
from mm2py.rest_api.server import RestServer
from tests.support.fake_flows import FakeWorker
from tests.support.oidc_provider import LocalIdentityProvider
from tests.support.rest_security import Pki, client_context, connect_basic_auth_files

pytestmark = pytest.mark.timeout(120)

PASSWORDS = {"admin": "admin-pw-7f3a", "viewer": "viewer-pw-91c2"}


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return Pki(tmp_path)


@pytest.fixture
async def serve() -> AsyncIterator[Any]:
    """``await serve(keys, **flags)``: a RestServer on a worker with one (faked) flow, its settings
    read from the worker configuration's ``keys`` as ``mm2py run`` reads them."""
    servers: list[RestServer] = []

    async def start(keys: Mapping[str, str], **flags: Any) -> RestServer:
        settings = rest_settings(keys, **flags)
        assert settings is not None
        worker = FakeWorker(**{"east->west.enabled": "true"})
        await worker.start()
        server = RestServer(worker, settings=settings)
        await server.start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        await server.stop()


def _no_secret_logged(caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str],
                      *secrets: str) -> None:
    out, err = capfd.readouterr()
    text = "\n".join(r.getMessage() for r in caplog.records) + out + err
    assert caplog.records, "the test captured no log line to check"
    for secret in secrets:
        assert secret not in text


async def test_connect_basic_auth_files_unchanged_with_a_read_only_user(
    pki: Pki, tmp_path: Path, serve: Any, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str],
) -> None:
    """Connect's JAAS file (found in KAFKA_OPTS) and users file: the read-only user reads (200) but
    gets 403 on a PATCH, the admin changes (200); no credentials, a wrong password and a malformed
    header get 401 with WWW-Authenticate, in Connect's body on Connect's routes. A client that does
    not trust the CA fails the handshake, plain HTTP to the HTTPS port gets nothing, and the server
    goes on. Each change writes one audit line; no password is logged."""
    caplog.set_level(logging.INFO)
    jaas = connect_basic_auth_files(tmp_path, PASSWORDS)
    server = await serve(pki.https_keys(**{"rest.extension.classes": BASIC_AUTH_EXTENSION,
                                             "mm2py.rest.read.only.users": "viewer"}),
                         kafka_opts=f"-Xmx1g -Djava.security.auth.login.config={jaas}")
    admin, viewer = (httpx.BasicAuth(name, PASSWORDS[name]) for name in ("admin", "viewer"))
    change = {"settings": {"tasks.max": 3}}
    async with httpx.AsyncClient(base_url=server.url, verify=client_context(pki.ca)) as http:
        for path in ("/flows", "/connectors", "/flows/east->west"):
            assert (await http.get(path, auth=viewer)).status_code == 200, path
        refused = await http.patch("/flows/east->west", json=change, auth=viewer)
        assert refused.status_code == 403 and "viewer may read but not change" in refused.json()["error"]
        connect_refused = await http.put("/connectors/x/pause", auth=viewer)
        assert connect_refused.status_code == 403 and connect_refused.json()["error_code"] == 403
        assert (await http.patch("/flows/east->west", json=change, auth=admin)).status_code == 200
        assert server.worker.flows["east->west"].flow.tasks_max == 3
        for path, auth, headers in (("/connectors", None, {}),
                                    ("/connectors", httpx.BasicAuth("admin", "nope"), {}),
                                    ("/flows", httpx.BasicAuth("ghost", "x"), {}),
                                    ("/connectors", None, {"authorization": "Basic %%%"})):
            answer = await http.get(path, auth=auth, headers=headers)
            assert answer.status_code == 401, (path, answer.text)
            assert answer.headers["www-authenticate"].startswith('Basic realm="KafkaConnect"')
            assert set(answer.json()) == ({"error_code", "message"} if path == "/connectors" else {"error"})
    with pytest.raises(httpx.ConnectError):  # the client does not trust the server's CA
        async with httpx.AsyncClient(base_url=server.url, verify=client_context(pki.other_ca)) as http:
            await http.get("/flows", auth=admin)
    with pytest.raises(httpx.HTTPError):  # plain HTTP to the HTTPS port
        async with httpx.AsyncClient(base_url=server.url.replace("https", "http"), timeout=10) as http:
            await http.get("/flows", auth=admin)
    async with httpx.AsyncClient(base_url=server.url, verify=client_context(pki.ca)) as http:
        assert (await http.get("/connectors", auth=admin)).status_code == 200  # still serving
    audit = [r.getMessage() for r in caplog.records if r.name == "mm2py.rest.audit"]
    assert audit == [
        'REST change: caller="viewer" method=PATCH path=/flows/east->west status=403 client=127.0.0.1',
        'REST change: caller="viewer" method=PUT path=/connectors/x/pause status=403 client=127.0.0.1',
        'REST change: caller="admin" method=PATCH path=/flows/east->west status=200 client=127.0.0.1',
    ]
    _no_secret_logged(caplog, capfd, *PASSWORDS.values(), "nope")


async def test_mutual_tls_required_names_the_caller_by_its_certificate(
    pki: Pki, serve: Any, caplog: pytest.LogCaptureFixture,
) -> None:
    """``ssl.client.auth=required`` (the worker's ``ssl.*`` keys, no ``listeners.https.`` key): a
    client with no certificate, or one from another CA, fails the handshake; a certificate's
    subject is the caller, ``CN=viewer`` read-only."""
    caplog.set_level(logging.INFO)
    keys = {"listeners": "https://127.0.0.1:0", "ssl.keystore.location": str(pki.server),
            "ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.ca),
            "ssl.client.auth": "required",
            "mm2py.rest.read.only.users": "CN=viewer"}
    server = await serve(keys)
    assert server.settings.authenticates
    change = {"settings": {"tasks.max": 4}}
    viewer, admin = (client_context(pki.ca, pki.client(cn)) for cn in ("viewer", "admin"))
    async with httpx.AsyncClient(base_url=server.url, verify=viewer) as http:
        assert (await http.get("/flows")).status_code == 200
        assert (await http.patch("/flows/east->west", json=change)).status_code == 403
    async with httpx.AsyncClient(base_url=server.url, verify=admin) as http:
        assert (await http.patch("/flows/east->west", json=change)).status_code == 200
    other_key, other_cert = _ca("foreign CA", datetime.datetime.now(datetime.UTC))
    for cert in (None, pki.client("intruder", other_key, other_cert)):
        with pytest.raises(httpx.HTTPError):
            async with httpx.AsyncClient(base_url=server.url, verify=client_context(pki.ca, cert)) as http:
                await http.get("/flows")
    audit = [r.getMessage() for r in caplog.records if r.name == "mm2py.rest.audit"]
    assert [line.split(" client=")[0] for line in audit] == [
        'REST change: caller="CN=viewer" method=PATCH path=/flows/east->west status=403',
        'REST change: caller="CN=admin" method=PATCH path=/flows/east->west status=200',
    ]


async def test_a_replaced_certificate_file_is_served_to_new_connections(pki: Pki, serve: Any) -> None:
    """The keystore file replaced while the server runs: the next connection gets the new
    certificate, with no restart."""
    server = await serve(pki.https_keys())

    async def served_cn() -> str:
        _, writer = await asyncio.open_connection("127.0.0.1", server.port, ssl=client_context(pki.ca))
        cert = writer.get_extra_info("ssl_object").getpeercert()
        writer.close()
        return dict(pair[0] for pair in cert["subject"])["commonName"]

    assert await served_cn() == "rest-server-1"
    pki.write_server_cert(pki.server, "rest-server-2")
    assert await served_cn() == "rest-server-2"
    assert server.tls is not None and server.tls.reloads == 1


async def test_bearer_tokens_from_a_local_jwks(
    pki: Pki, tmp_path: Path, serve: Any, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str],
) -> None:
    """A JWT signed by the issuer's key is accepted; expired, wrong audience, forged and
    unsigned ones get 401; the read-only claim gets 403 on a change; a token of a rotated key is
    accepted (the keys read again), one of the key it replaced no longer. No token is logged."""
    caplog.set_level(logging.INFO)
    idp = LocalIdentityProvider(tmp_path / "idp", {"ops": "ops-secret"})
    idp.start()
    try:
        server = await serve(pki.https_keys(**{
            "mm2py.rest.jwt.jwks.url": idp.jwks_url(), "mm2py.rest.jwt.issuer": idp.issuer,
            "mm2py.rest.jwt.audience": "mm2py", "mm2py.rest.jwt.jwks.refresh.cooldown.seconds": "0"}))
        now = int(time.time())
        claims = {"sub": "ops", "iss": idp.issuer, "aud": "mm2py", "iat": now, "exp": now + 600}
        good, expired = idp.sign(claims), idp.sign({**claims, "exp": now - 60})
        reader = idp.sign({**claims, "sub": "auditor", "mm2py_read_only": True})
        wrong_audience = idp.sign({**claims, "aud": "someone-else"})
        forged = good[:-8] + ("AAAAAAAA" if not good.endswith("AAAAAAAA") else "BBBBBBBB")
        change = {"settings": {"tasks.max": 5}}
        async with httpx.AsyncClient(base_url=server.url, verify=client_context(pki.ca)) as http:
            def bearer(token: str) -> dict[str, str]:
                return {"authorization": f"Bearer {token}"}

            path = "/flows/east->west"
            assert (await http.patch(path, json=change, headers=bearer(good))).status_code == 200
            assert (await http.get("/connectors", headers=bearer(reader))).status_code == 200
            assert (await http.patch(path, json=change, headers=bearer(reader))).status_code == 403
            for token in (expired, wrong_audience, forged, "not.a.jwt"):
                answer = await http.get("/connectors", headers=bearer(token))
                assert answer.status_code == 401 and answer.json()["error_code"] == 401, answer.text
                assert answer.headers["www-authenticate"].startswith("Bearer")
            assert (await http.get("/flows")).status_code == 401
            # the issuer rotates its key: a token of the new key id makes the keys be read again
            from cryptography.hazmat.primitives.asymmetric import rsa

            idp._key, idp.kid = rsa.generate_private_key(public_exponent=65537, key_size=2048), "rotated"
            rotated = await http.get("/flows", headers=bearer(idp.sign(claims)))
            assert rotated.status_code == 200, rotated.text
            assert (await http.get("/flows", headers=bearer(good))).status_code == 401  # the old key is gone
    finally:
        idp.stop()
    audit = [r.getMessage().split(" client=")[0] for r in caplog.records if r.name == "mm2py.rest.audit"]
    assert audit == ['REST change: caller="ops" method=PATCH path=/flows/east->west status=200',
                     'REST change: caller="auditor" method=PATCH path=/flows/east->west status=403']
    _no_secret_logged(caplog, capfd, good, reader, expired, good.split(".")[1])


async def test_a_listener_beyond_loopback_without_authentication_is_warned_about(
    serve: Any, caplog: pytest.LogCaptureFixture,
) -> None:
    await serve({"listeners": "http://:0"})
    warned = "reachable beyond this machine with no authentication"
    assert any(warned in r.getMessage() for r in caplog.records)


def test_keystores_pkcs12_served_and_jks_refused_with_the_keytool_command(pki: Pki, tmp_path: Path) -> None:
    """A PKCS12 keystore (the type Kafka's tools write) loads; a JKS store is refused naming the
    ``keytool`` command that converts it."""
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import (
        BestAvailableEncryption,
        load_pem_private_key,
        pkcs12,
    )

    from mm2py.rest_api.security.tls import server_context

    data = pki.server.read_bytes()
    key = load_pem_private_key(data, None)
    cert = x509.load_pem_x509_certificates(data)[0]
    store = tmp_path / "server.p12"
    store.write_bytes(pkcs12.serialize_key_and_certificates(b"rest", key, cert, [pki.ca_cert],  # type: ignore[arg-type]
                                                            BestAvailableEncryption(b"store-pw")))
    keys = {"listeners": "https://127.0.0.1:0", "listeners.https.ssl.keystore.type": "PKCS12",
            "listeners.https.ssl.keystore.location": str(store),
            "listeners.https.ssl.keystore.password": "store-pw"}
    settings = rest_settings(keys)
    assert settings is not None and settings.tls is not None
    assert server_context(settings.tls).minimum_version == ssl.TLSVersion.TLSv1_2
    wrong = rest_settings({**keys, "listeners.https.ssl.keystore.password": "guess"})
    assert wrong is not None and wrong.tls is not None
    with pytest.raises(ConfigError, match="cannot open the PKCS12 store") as failed:
        server_context(wrong.tls)
    assert "guess" not in str(failed.value)
    jks = tmp_path / "server.jks"
    jks.write_bytes(b"\xfe\xed\xfe\xed" + bytes(64))
    jks_settings = rest_settings({**keys, "listeners.https.ssl.keystore.type": "JKS",
                                  "listeners.https.ssl.keystore.location": str(jks)})
    assert jks_settings is not None and jks_settings.tls is not None
    keytool = r"keytool -importkeystore -srckeystore \S*server\.jks -srcstoretype JKS"
    with pytest.raises(ConfigError, match=keytool):
        server_context(jks_settings.tls)


async def test_every_operation_asks_for_credentials_and_every_change_is_refused_to_a_reader(
    pki: Pki, tmp_path: Path, serve: Any, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str],
) -> None:
    """Each operation of the OpenAPI document, the operator page's routes and ``/docs`` itself:
    401 with no credentials and with malformed ones (never a server error); the read-only user
    gets 403 on every change (Connect's ``config/validate``, which changes nothing, aside)."""
    caplog.set_level(logging.INFO)
    jaas = connect_basic_auth_files(tmp_path, PASSWORDS)
    server = await serve(pki.https_keys(**{"rest.extension.classes": BASIC_AUTH_EXTENSION,
                                             "mm2py.rest.read.only.users": "viewer"}),
                         jaas_config=str(jaas))
    operations = [(method.upper(), path) for path, item in server.app.openapi()["paths"].items()
                  for method in item]
    operations += [("GET", p) for p in ("/ui", "/ui/state", "/ui/app.js", "/docs", "/openapi.json")]
    assert len(operations) > 40
    malformed = [{"authorization": "Basic"}, {"authorization": "Basic !!!"},
                 {"authorization": "Basic " + "QQ==" * 2000}, {"authorization": "Bearer x.y.z"},
                 {"authorization": "Digest username=admin"}, {"authorization": "Basic w6k6w6k="}]
    viewer = httpx.BasicAuth("viewer", PASSWORDS["viewer"])
    async with httpx.AsyncClient(base_url=server.url, verify=client_context(pki.ca), timeout=30) as http:
        async def check(index: int, method: str, template: str) -> None:
            path = template.replace("{name}", "east->west").replace("{source}", "east").replace(
                "{target}", "west")
            path = path.replace("{", "").replace("}", "")
            for headers in ({}, malformed[index % len(malformed)]):  # each kind on several routes
                answer = await http.request(method, path, headers=headers)
                assert answer.status_code == 401, (method, path, headers, answer.text)
                assert "www-authenticate" in answer.headers
            if method not in ("GET", "HEAD", "OPTIONS"):
                answer = await http.request(method, path, auth=viewer, json={})
                expected = 403 if not path.endswith("/config/validate") else answer.status_code
                assert answer.status_code == expected < 500, (method, path, answer.text)

        await asyncio.gather(*(check(i, method, path) for i, (method, path) in enumerate(operations)))
    _no_secret_logged(caplog, capfd, *PASSWORDS.values())


@pytest.mark.cli_process
def test_mm2py_run_reads_connects_keys_and_kafka_opts_and_secures_the_metrics_port(
    pki: Pki, tmp_path: Path,
) -> None:
    """``mm2py run`` as a Connect worker is started: the HTTPS listener and the Basic extension from
    the configuration file, the JAAS file from ``KAFKA_OPTS``; ``--metrics-secured`` serves the
    metrics port over the same TLS and behind the same login. No broker is needed (no flow)."""
    import signal
    import subprocess
    import sys

    from mm2py.kafka_local.cluster import free_port

    jaas = connect_basic_auth_files(tmp_path, PASSWORDS)
    keys = {"clusters": "east, west", "east.bootstrap.servers": "127.0.0.1:1",
            "west.bootstrap.servers": "127.0.0.1:2", "emit.heartbeats.enabled": "false",
            **pki.https_keys(**{"rest.extension.classes": BASIC_AUTH_EXTENSION})}
    config = tmp_path / "worker.properties"
    config.write_text("".join(f"{key} = {value}\n" for key, value in keys.items()))
    proc = subprocess.Popen(
        [sys.executable, "-m", "mm2py.cli", "run", "--config", str(config),
         "--metrics-port", str(free_port()), "--metrics-secured"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1",
             "KAFKA_OPTS": f"-Xmx256m -Djava.security.auth.login.config={jaas}"})
    try:
        assert proc.stdout is not None
        lines = [proc.stdout.readline() for _ in range(3)]
        metrics_url = lines[0].split()[-1]
        rest_url = lines[1].split()[2]
        assert metrics_url.startswith("https://127.0.0.1:"), lines
        assert rest_url.startswith("https://127.0.0.1:"), lines
        admin = httpx.BasicAuth("admin", PASSWORDS["admin"])
        with httpx.Client(verify=client_context(pki.ca), timeout=30) as http:
            assert http.get(rest_url + "/flows").status_code == 401
            assert http.get(rest_url + "/flows", auth=admin).json() == {"flows": []}
            assert http.get(metrics_url).status_code == 401
            scraped = http.get(metrics_url, auth=admin)
            assert scraped.status_code == 200 and "mm2py_" in scraped.text
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0, out
        assert not any(password in "".join(lines) + out for password in PASSWORDS.values())
    finally:
        if proc.poll() is None:
            proc.kill()


async def test_the_development_certificate_and_users_serve_https_as_the_compose_setup_does(
        tmp_path: Path, serve: Any) -> None:
    """What the compose setup runs before its worker (``dev_cert --dir``): the worker serves HTTPS
    with the files as they are, ``viewer`` reads and may not change, ``admin`` changes, the health
    check's ``--probe`` passes; a second run keeps every file (passwords stay)."""
    from mm2py.config.properties import parse_properties
    from mm2py.rest_api.security import dev_cert

    certs = tmp_path / "certs"
    assert dev_cert.main(["--dir", str(certs), "--host", "mm2py"]) == 0
    before = {f: (certs / f).read_bytes() for f in dev_cert.FILES}
    assert dev_cert.write_dev_files(certs, ["mm2py"]) == [] and all(
        (certs / f).read_bytes() == data for f, data in before.items())
    keys = {"listeners": "https://127.0.0.1:0", "listeners.https.ssl.keystore.type": "PEM",
            "listeners.https.ssl.keystore.location": str(certs / "rest.pem"),
            "rest.extension.classes": BASIC_AUTH_EXTENSION, "mm2py.rest.read.only.users": "viewer"}
    server = await serve(keys, jaas_config=str(certs / "rest-jaas.conf"))
    users = parse_properties((certs / "rest-users.properties").read_text())
    assert set(users) == {"admin", "viewer"} and len(set(users.values())) == 2
    async with httpx.AsyncClient(base_url=server.url, verify=client_context(certs / "ca.pem")) as http:
        viewer, admin = httpx.BasicAuth("viewer", users["viewer"]), httpx.BasicAuth("admin", users["admin"])
        assert (await http.get("/flows", auth=viewer)).status_code == 200
        assert (await http.get("/flows")).status_code == 401
        change = {"settings": {"tasks.max": 3}}
        assert (await http.patch("/flows/east->west", json=change, auth=viewer)).status_code == 403
        assert (await http.patch("/flows/east->west", json=change, auth=admin)).status_code == 200
    # the health check's probe, from a thread (it blocks), trusting only the development CA
    assert await asyncio.to_thread(dev_cert.probe, f"{server.url}/flows", certs) == 200
    for url, status in ((f"{server.url}/flows", 0), (server.url.replace("https", "http") + "/flows", 1)):
        assert await asyncio.to_thread(dev_cert.main, ["--dir", str(certs), "--probe", url]) == status
