"""Ray's gRPC over mutual TLS for one run (inventory: RAY_TLS: true).

The pinned Ray reads RAY_USE_TLS, RAY_TLS_SERVER_CERT, RAY_TLS_SERVER_KEY and RAY_TLS_CA_CERT in its Python gRPC servers
and channels (ray/_private/tls_utils.py load_certs_from_env, ray/_private/grpc_utils.py init_grpc_channel) and in
its C++ core (RayConfig USE_TLS, TLS_SERVER_CERT, TLS_SERVER_KEY, TLS_CA_CERT). One certificate per node serves as
both its server and its client certificate, and a server asks for a client certificate signed by the CA: a host
without one of this run's certificates cannot talk to the run's GCS, raylets or workers, whatever its address.

A new CA per run, made on the controller in memory: it signs one certificate per node for the node's Ray address
(and loopback) and is thrown away, so no key that could sign another exists anywhere. The nodes get their own key
(0600) and the CA's certificate; `stop` deletes them with the run's other private files."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from dapo_ops.errors import InventoryError, UsageError
from dapo_ops.model.values import ansible_bool
from dapo_ops.model.variables import RAY_TLS

TLS_VAR = RAY_TLS.name
CA_NAME, CERT_NAME, KEY_NAME = "ray-tls-ca.crt", "ray-tls.crt", "ray-tls.key"
# Long enough for any training run; the CA's key is gone once the run's certificates are signed.
VALIDITY = datetime.timedelta(days=365)
# A node's clock behind the controller's (by up to a day) still accepts the certificates.
BACKDATE = datetime.timedelta(days=1)


def tls_wanted(value: object, where: str) -> bool:
    """RAY_TLS as Ansible reads a boolean (YAML true/false, INI's strings)."""
    try:
        return ansible_bool(value, TLS_VAR, False, where)
    except InventoryError as exc:
        raise UsageError(str(exc)) from None


@dataclass(frozen=True)
class NodeCredentials:
    certificate: str     # PEM: the node's certificate, for its Ray address and loopback
    key: str             # PEM: its private key (0600 on the node)

    def files(self, ca: str) -> dict[str, str]:
        return {CA_NAME: ca, CERT_NAME: self.certificate, KEY_NAME: self.key}


def run_credentials(run_id: str, addresses: dict[str, str], now: datetime.datetime | None = None,
                    ) -> dict[str, dict[str, str]]:
    """Node name -> its TLS files ({CA_NAME, CERT_NAME, KEY_NAME: PEM}), signed by a CA made for this run only."""
    now = now or datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"dapo-ops run {run_id} CA")])
    ca_cert = (_builder(ca_name, ca_name, ca_key.public_key(), now)
               .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
               .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
               .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False, key_encipherment=False,
                                            data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                            crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
               .sign(ca_key, hashes.SHA256()))
    ca_pem = ca_cert.public_bytes(serialization.Encoding.PEM).decode()
    return {name: _node(name, address, ca_cert, ca_key, now).files(ca_pem) for name, address in addresses.items()}


def _node(name: str, address: str, ca_cert: x509.Certificate, ca_key: ec.EllipticCurvePrivateKey,
          now: datetime.datetime) -> NodeCredentials:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        raise UsageError(f"{name}: Ray's TLS certificate needs the node's IP address, not {address!r}") from None
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    names = [x509.IPAddress(ip), x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
    certificate = (_builder(subject, ca_cert.subject, key.public_key(), now)
                   .add_extension(x509.SubjectAlternativeName(names), critical=False)
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                   .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
                   .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_cert.public_key()),
                                  critical=False)
                   .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                         ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
                   .sign(ca_key, hashes.SHA256()))
    return NodeCredentials(
        certificate=certificate.public_bytes(serialization.Encoding.PEM).decode(),
        key=key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                              serialization.NoEncryption()).decode())


def _builder(subject: x509.Name, issuer: x509.Name, public_key, now: datetime.datetime) -> x509.CertificateBuilder:
    return (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - BACKDATE).not_valid_after(now + VALIDITY))
