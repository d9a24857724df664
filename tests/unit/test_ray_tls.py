"""Issue 26 (9): Ray's gRPC over mutual TLS, with a CA made for each run (dapo_ops/job/ray_tls.py): the certificates
as made, a real TLS handshake with them (Python's ssl, OpenSSL: Ray's gRPC uses BoringSSL, which the simulated
fleet's launch exercises), env.sh as rendered, and the files `stop` removes."""

import datetime
import ssl
import socket
import threading
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import ExtendedKeyUsageOID

from dapo_ops.errors import UsageError
from dapo_ops.job.ray_tls import CA_NAME, CERT_NAME, KEY_NAME, run_credentials, tls_wanted
from dapo_ops.launch.teardown import leave_command

from .test_ray_security import rendered

ADDRESSES = {"node1": "10.1.0.1", "node2": "10.1.0.2"}


@pytest.fixture(scope="module")
def credentials():
    return run_credentials("run-1", ADDRESSES)


def certificate(pem: str) -> x509.Certificate:
    return x509.load_pem_x509_certificate(pem.encode())


def test_each_node_gets_a_certificate_for_its_address_signed_by_the_run_s_own_ca(credentials):
    assert set(credentials) == set(ADDRESSES)
    ca = certificate(credentials["node1"][CA_NAME])
    assert credentials["node2"][CA_NAME] == credentials["node1"][CA_NAME]
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert "run-1" in ca.subject.rfc4514_string()
    for name, address in ADDRESSES.items():
        node = certificate(credentials[name][CERT_NAME])
        node.verify_directly_issued_by(ca)
        names = node.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert {str(ip) for ip in names.get_values_for_type(x509.IPAddress)} == {address, "127.0.0.1"}
        usage = node.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
        assert {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH} <= set(usage)
        assert not node.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
        authority = node.extensions.get_extension_for_class(x509.AuthorityKeyIdentifier).value.key_identifier
        assert authority == ca.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value.digest
        key = serialization.load_pem_private_key(credentials[name][KEY_NAME].encode(), password=None)
        assert key.public_key().public_numbers() == node.public_key().public_numbers()
    assert credentials["node1"][KEY_NAME] != credentials["node2"][KEY_NAME]


def test_a_certificate_is_valid_from_a_day_before_now_for_a_year():
    now = datetime.datetime(2026, 12, 4, 12, 0, tzinfo=datetime.timezone.utc)
    node = certificate(run_credentials("run-1", {"node1": "10.1.0.1"}, now=now)["node1"][CERT_NAME])
    assert node.not_valid_before_utc < now < node.not_valid_after_utc
    assert datetime.timedelta(hours=1) < now - node.not_valid_before_utc <= datetime.timedelta(days=1)
    assert node.not_valid_after_utc - now >= datetime.timedelta(days=300)


def test_another_run_s_ca_does_not_vouch_for_this_run_s_nodes(credentials):
    other = certificate(run_credentials("run-2", ADDRESSES)["node1"][CA_NAME])
    with pytest.raises(Exception):
        certificate(credentials["node1"][CERT_NAME]).verify_directly_issued_by(other)


def test_a_node_without_an_ip_address_gets_no_certificate():
    with pytest.raises(UsageError, match="node1: Ray's TLS certificate needs the node's IP address, not 'node1.lab'"):
        run_credentials("run-1", {"node1": "node1.lab"})


def files_in(tmp_path: Path, node: dict[str, str], prefix: str) -> dict[str, str]:
    paths = {}
    for name, text in node.items():
        path = tmp_path / f"{prefix}-{name}"
        path.write_text(text)
        paths[name] = str(path)
    return paths


def handshake(tmp_path, server_files, client_files, server_address="127.0.0.1"):
    """A mutual-TLS server as Ray's (a client certificate signed by the CA required) and one client; the client's
    outcome ("ok" or the error)."""
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(server_files[CERT_NAME], server_files[KEY_NAME])
    server_ctx.load_verify_locations(server_files[CA_NAME])
    server_ctx.verify_mode = ssl.CERT_REQUIRED
    listener = socket.create_server((server_address, 0))
    port = listener.getsockname()[1]

    def serve():
        conn, _ = listener.accept()
        try:
            with server_ctx.wrap_socket(conn, server_side=True) as tls:
                tls.sendall(b"hello")
        except (ssl.SSLError, OSError):
            pass
        finally:
            listener.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    client_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client_ctx.load_verify_locations(client_files[CA_NAME])
    if CERT_NAME in client_files:
        client_ctx.load_cert_chain(client_files[CERT_NAME], client_files[KEY_NAME])
    try:
        with socket.create_connection((server_address, port), timeout=10) as raw, \
                client_ctx.wrap_socket(raw, server_hostname=server_address) as tls:
            return "ok" if tls.recv(5) == b"hello" else "no data"
    except (ssl.SSLError, OSError) as exc:
        return str(exc)
    finally:
        thread.join(10)


def test_two_nodes_of_a_run_complete_a_mutual_tls_handshake(tmp_path):
    run = run_credentials("run-1", {"node1": "127.0.0.1", "node2": "10.1.0.2"})
    node1, node2 = files_in(tmp_path, run["node1"], "n1"), files_in(tmp_path, run["node2"], "n2")
    assert handshake(tmp_path, node1, node2) == "ok"


def test_a_client_without_the_run_s_certificate_is_refused(tmp_path):
    run = run_credentials("run-1", {"node1": "127.0.0.1"})
    stranger = run_credentials("run-2", {"x": "127.0.0.1"})["x"]
    server = files_in(tmp_path, run["node1"], "n1")
    no_certificate = files_in(tmp_path, {CA_NAME: run["node1"][CA_NAME]}, "anon")
    other_run = files_in(tmp_path, dict(stranger, **{CA_NAME: run["node1"][CA_NAME]}), "other")
    assert handshake(tmp_path, server, no_certificate) != "ok"
    assert handshake(tmp_path, server, other_run) != "ok"


@pytest.mark.parametrize("value, wanted", [(True, True), (False, False), (None, False), ("true", True),
                                           ("False", False), ("yes", True), ("0", False)])
def test_dapo_ray_tls_reads_as_ansible_reads_a_boolean(value, wanted):
    assert tls_wanted(value, "node1") is wanted


def test_dapo_ray_tls_that_is_no_boolean_is_refused():
    with pytest.raises(UsageError, match="node1: dapo_ray_tls must be true or false \\(got 'maybe'\\)"):
        tls_wanted("maybe", "node1")


def test_env_sh_points_ray_at_the_run_s_tls_files_only_when_asked():
    files = rendered(attempt="run-1", dapo_ray_tls=True)
    env = files["nodes/a/env.sh"]
    for line in ("export RAY_USE_TLS=1", f"export RAY_TLS_SERVER_CERT=/var/lib/dapo-ops/runs/run-1/{CERT_NAME}",
                 f"export RAY_TLS_SERVER_KEY=/var/lib/dapo-ops/runs/run-1/{KEY_NAME}",
                 f"export RAY_TLS_CA_CERT=/var/lib/dapo-ops/runs/run-1/{CA_NAME}"):
        assert line in env.splitlines()
    # exported after env.extra, so a job spec cannot turn it off
    assert env.index("export RAY_USE_TLS=1") > env.index("export TENSORBOARD_DIR=")
    plain = rendered(attempt="run-1")["nodes/a/env.sh"]
    assert "unset RAY_USE_TLS" in plain.splitlines() and "RAY_TLS_SERVER_KEY" not in plain


def test_tls_on_some_nodes_of_a_run_only_is_refused():
    from dapo_ops.job.placement import place
    from dapo_ops.job.render import pick_nodes
    from dapo_ops.job.spec import parse_spec
    from dapo_ops.manifest import load_manifest

    from .test_ray_security import host, spec_data

    _, hosts = place(parse_spec(spec_data()), [host("a", dapo_ray_tls=True), host("b")])
    with pytest.raises(UsageError, match="dapo_ray_tls must be the same on every node of a run \\(true on a, not on b\\)"):
        pick_nodes(hosts, load_manifest(), {"a": "10.1.0.1", "b": "10.1.0.2"})


def test_stop_removes_the_run_s_tls_key_and_certificates():
    command = leave_command("run-1")
    for name in (CA_NAME, CERT_NAME, KEY_NAME):
        assert f"/var/lib/dapo-ops/runs/run-1/{name}" in command

