"""The lab CA and the serving certificate (RSA 2048, like kubeadm's), kept in the state directory.

The CA is reused across restarts so kubeconfigs and `--discovery-token-ca-cert-hash` values stay valid; the
serving certificate is reissued when the addresses it must cover change.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

DEFAULT_DNS = ("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
               "kubernetes.default.svc.cluster.local")  # fmt: skip


@dataclass(frozen=True)
class Pki:
    ca_cert: Path
    ca_key: Path
    serving_cert: Path
    serving_key: Path

    def ca_pem(self) -> bytes:
        return self.ca_cert.read_bytes()


def _key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _write_key(path: Path, key: rsa.RSAPrivateKey) -> None:
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                                       serialization.NoEncryption()))  # fmt: skip
    path.chmod(0o600)


def _load_key(path: Path) -> rsa.RSAPrivateKey:
    key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    assert isinstance(key, rsa.RSAPrivateKey)
    return key


def ensure_pki(directory: Path, ip_sans: list[str], dns_sans: list[str] | None = None) -> Pki:
    directory.mkdir(parents=True, exist_ok=True)
    pki = Pki(
        directory / "ca.crt", directory / "ca.key", directory / "apiserver.crt", directory / "apiserver.key"
    )
    now = dt.datetime.now(dt.UTC)
    if not pki.ca_cert.exists() or not pki.ca_key.exists():
        key = _key()
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kubernetes")])
        cert = (
            x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=3650))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_encipherment=True, key_cert_sign=True,
                                         content_commitment=False, data_encipherment=False, key_agreement=False,
                                         crl_sign=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256())
        )  # fmt: skip
        _write_key(pki.ca_key, key)
        pki.ca_cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    ips = sorted({*ip_sans, "127.0.0.1", "10.96.0.1"})
    dns = sorted({*DEFAULT_DNS, *(dns_sans or [])})
    if _serving_covers(pki.serving_cert, ips, dns) and pki.serving_key.exists():
        return pki
    ca_key = _load_key(pki.ca_key)
    ca_cert = x509.load_pem_x509_certificate(pki.ca_cert.read_bytes())
    key = _key()
    sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
    sans += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]))
        .issuer_name(ca_cert.subject).public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=365))
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    _write_key(pki.serving_key, key)
    pki.serving_cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM) + pki.ca_pem())
    return pki


def _serving_covers(path: Path, ips: list[str], dns: list[str]) -> bool:
    if not path.exists():
        return False
    cert = x509.load_pem_x509_certificate(path.read_bytes())
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    have_ips = {str(i) for i in san.get_values_for_type(x509.IPAddress)}
    have_dns = set(san.get_values_for_type(x509.DNSName))
    return set(ips) <= have_ips and set(dns) <= have_dns


def ca_cert_hash(ca_cert_pem: bytes) -> str:
    """kubeadm's `--discovery-token-ca-cert-hash`: sha256 of the CA's DER SubjectPublicKeyInfo."""
    cert = x509.load_pem_x509_certificate(ca_cert_pem)
    spki = cert.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return "sha256:" + hashlib.sha256(spki).hexdigest()


def sign_client_csr(pki: Pki, csr_pem: bytes, days: int = 365) -> bytes:
    """Issue a client certificate for a CSR (the kubelet client-cert flow); subject is taken from the CSR."""
    csr = x509.load_pem_x509_csr(csr_pem)
    ca_key = _load_key(pki.ca_key)
    ca_cert = x509.load_pem_x509_certificate(pki.ca_cert.read_bytes())
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder().subject_name(csr.subject).issuer_name(ca_cert.subject)
        .public_key(csr.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    return cert.public_bytes(serialization.Encoding.PEM)
