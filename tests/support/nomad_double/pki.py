# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Throw-away TLS material for the API doubles (and for the tests' clients): a CA, a server certificate for
127.0.0.1/localhost and a client certificate, made with ``cryptography``. Nothing here is Nomad's."""

from __future__ import annotations

import datetime
import ipaddress
import os
import tempfile
import typing as t
from dataclasses import dataclass


@dataclass(frozen=True)
class TestPKI:
    """A throw-away CA, a server certificate for 127.0.0.1/localhost and a client certificate (PEM files)."""

    __test__ = False  # not a pytest test class
    directory: str
    ca_cert: str
    server_cert: str
    server_key: str
    client_cert: str
    client_key: str


def make_test_pki(directory: t.Optional[str] = None) -> TestPKI:
    """Generate the PKI with ``cryptography`` (EC P-256, valid for one day)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    directory = directory or tempfile.mkdtemp(prefix="nomad-double-pki-")
    now = datetime.datetime.now(datetime.timezone.utc)

    def _name(cn: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    def _write(name: str, data: bytes) -> str:
        path = os.path.join(directory, name)
        with open(path, "wb") as f:
            f.write(data)
        os.chmod(path, 0o600)
        return path

    def _key_pem(key: t.Any) -> bytes:
        return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                 serialization.NoEncryption())

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (x509.CertificateBuilder().subject_name(_name("Nomad API double test CA")).issuer_name(_name("Nomad API double test CA"))
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                       data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
                                       encipher_only=False, decipher_only=False), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
          .sign(ca_key, hashes.SHA256()))

    def _leaf(cn: str, usage: t.Any, san: t.Optional[x509.SubjectAlternativeName]) -> t.Tuple[t.Any, t.Any]:
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(ca.subject).public_key(key.public_key())
                   .serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                   .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
                   .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False))
        if san is not None:
            builder = builder.add_extension(san, critical=False)
        return key, builder.sign(ca_key, hashes.SHA256())

    san = x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
    server_key, server = _leaf("server.global.nomad", ExtendedKeyUsageOID.SERVER_AUTH, san)
    client_key, client = _leaf("client.global.nomad", ExtendedKeyUsageOID.CLIENT_AUTH, None)
    pem = serialization.Encoding.PEM
    return TestPKI(
        directory=directory,
        ca_cert=_write("ca.pem", ca.public_bytes(pem)),
        server_cert=_write("server.pem", server.public_bytes(pem)),
        server_key=_write("server-key.pem", _key_pem(server_key)),
        client_cert=_write("client.pem", client.public_bytes(pem)),
        client_key=_write("client-key.pem", _key_pem(client_key)),
    )


# Requests, recordings, faults ------------------------------------------------------------------
