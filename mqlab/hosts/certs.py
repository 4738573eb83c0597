"""``mqlab hosts certs DIR``: a dedicated CA and the certificates a TLS Dask cluster needs.

Made with the ``cryptography`` package: an EC P-256 CA (``ca.pem``, its key
``ca-key.pem``), and one key and certificate each for the scheduler, the workers
and the client (the controller), signed by the CA, valid for both TLS sides
(Dask authenticates both ends of every connection against the CA). Keys are
written mode 0600. Dask does not check host names, so the certificates carry
none that matter: what admits a peer is the CA's signature alone, which is why
the CA must be mqlab's own, and its key kept off the hosts.
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from mqlab.errors import MqlabError

__all__ = ["ROLES", "CertPaths", "make", "paths"]

ROLES = ("scheduler", "worker", "client")
#: long enough for a campaign, short enough that a lost copy expires
VALID_DAYS = 90


class CertsError(MqlabError):
    """The certificates could not be made or read; one line naming the file."""


@dataclass(frozen=True, slots=True)
class CertPaths:
    ca: Path
    cert: Path
    key: Path


def paths(directory: str | Path, role: str) -> CertPaths:
    """Where ``role``'s certificate and key are in ``directory``; refused if missing."""
    d = Path(directory)
    out = CertPaths(d / "ca.pem", d / f"{role}.pem", d / f"{role}-key.pem")
    for p in (out.ca, out.cert, out.key):
        if not p.is_file():
            raise CertsError(
                f"{p}: no such file; make the certificates with `mqlab hosts certs {d}`"
            )
    return out


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    data = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def make(directory: str | Path) -> list[Path]:
    """A new CA and a certificate per role in ``directory`` (created 0700); the files made.

    Refuses a directory that already holds a CA: a new one would lock out every host
    that trusts the old one.
    """
    d = Path(directory)
    if (d / "ca.pem").exists():
        raise CertsError(f"{d / 'ca.pem'} exists; remove the directory to make a new CA")
    try:
        d.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise CertsError(f"{d}: {exc.strerror or exc}") from None
    now = datetime.datetime.now(datetime.UTC)
    until = now + datetime.timedelta(days=VALID_DAYS)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("mqlab hosts CA")
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(until)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    made = [d / "ca.pem", d / "ca-key.pem"]
    (d / "ca.pem").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    _write_key(d / "ca-key.pem", ca_key)
    for role in ROLES:
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (
            x509.CertificateBuilder()
            .subject_name(_name(f"mqlab {role}"))
            .issuer_name(ca_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(until)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.ExtendedKeyUsage(
                    [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
                ),
                critical=False,
            )
            .sign(ca_key, hashes.SHA256())
        )
        (d / f"{role}.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_key(d / f"{role}-key.pem", key)
        made += [d / f"{role}.pem", d / f"{role}-key.pem"]
    return made
