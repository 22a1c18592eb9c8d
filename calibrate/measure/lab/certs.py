"""The lab's private CA and one client/server certificate per service, made fresh at ``lab up`` for mTLS mode.

Keys are ECDSA P-256 (what Istio's CA issues by default). Each certificate carries CN=<service> and an Istio-style
SPIFFE URI SAN, so the upstream app sees ``Subject="CN=<service>"`` in the XFCC header its sidecar sets.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

TRUST_DOMAIN = "meshsim.lab"


@dataclass(frozen=True)
class CertFiles:
    cert: Path
    key: Path


def spiffe_id(service: str) -> str:
    return f"spiffe://{TRUST_DOMAIN}/ns/lab/sa/{service}"


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
    path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    path.chmod(0o600)


def make_lab_pki(folder: Path, services: list[str]) -> tuple[Path, dict[str, CertFiles]]:
    """Write ca.pem and <service>.pem/<service>.key for every service; return the CA path and the files."""
    folder.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.timezone.utc)
    valid = (now - dt.timedelta(minutes=5), now + dt.timedelta(days=2))
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "meshsim lab"),
                         x509.NameAttribute(NameOID.COMMON_NAME, "meshsim lab CA")])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(valid[0])
        .not_valid_after(valid[1])
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    ca_path = folder / "ca.pem"
    ca_path.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    files: dict[str, CertFiles] = {}
    for service in services:
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, service)]))
            .issuer_name(ca_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(valid[0])
            .not_valid_after(valid[1])
            .add_extension(
                x509.SubjectAlternativeName([x509.DNSName(service), x509.UniformResourceIdentifier(spiffe_id(service))]),
                critical=False,
            )
            .add_extension(
                x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False
            )
            .sign(ca_key, hashes.SHA256())
        )
        cert_path, key_path = folder / f"{service}.pem", folder / f"{service}.key"
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_key(key, key_path)
        files[service] = CertFiles(cert_path, key_path)
    return ca_path, files
