"""``mqlab hosts certs DIR``: a dedicated CA and the certificates a TLS Dask cluster needs.

Made with the ``cryptography`` package: an EC P-256 CA (``ca.pem``, its key
``ca-key.pem``), and one key and certificate each for the scheduler, the workers
and the client (the controller), signed by the CA, valid for both TLS sides
(Dask authenticates both ends of every connection against the CA). Dask does not
check host names, so the certificates carry none that matter: what admits a peer
is the CA's signature alone, which is why the CA must be mqlab's own, and its key
kept off the hosts.

Every file is written inside the directory itself: a new file of its own (never
through a symbolic link or a hard link that stands at the name), mode 0600 for a
key whatever stood there before, renamed into place. The client's files are read
back before a run uses them: a key others can read, or a file that is no key or no
certificate, is refused in one line naming it.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from mqlab import inputs
from mqlab.errors import MqlabError

__all__ = ["ROLES", "CertPaths", "CertsError", "make", "paths", "usable"]

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
        if not p.exists():
            raise CertsError(
                f"{p}: no such file; make the certificates with `mqlab hosts certs {d}`"
            )
    return out


#: the most a PEM key or certificate of mqlab's takes (they are well under 1 KiB)
_MAX_PEM = 64 * 1024


def _read(path: Path) -> bytes:
    try:
        return inputs.read(path, _MAX_PEM)
    except OSError as exc:
        raise CertsError(f"{path}: cannot read it: {exc.strerror or exc}") from None


def usable(directory: str | Path, role: str = "client") -> CertPaths:
    """``role``'s files, read back and checked: certificates that parse, a key that parses,
    belongs to the certificate and only its owner can read; CertsError (one line) if not."""
    p = paths(directory, role)
    mode = stat.S_IMODE(os.stat(p.key).st_mode)
    if mode & 0o077:
        raise CertsError(
            f"{p.key}: other users can read this private key (mode {mode:04o}); whoever reads "
            f"it can join the cluster: chmod 600 {p.key}"
        )
    certs = {}
    for path in (p.ca, p.cert):
        try:
            certs[path] = x509.load_pem_x509_certificate(_read(path))
        except ValueError:
            raise CertsError(
                f"{path}: not a PEM certificate; make the certificates with `mqlab hosts certs DIR`"
            ) from None
    try:
        key = serialization.load_pem_private_key(_read(p.key), password=None)
    except (ValueError, TypeError, UnsupportedAlgorithm):
        raise CertsError(
            f"{p.key}: not an unencrypted PEM private key; make the certificates with "
            "`mqlab hosts certs DIR`"
        ) from None
    mine = certs[p.cert].public_key().public_bytes(*_SPKI)
    if key.public_key().public_bytes(*_SPKI) != mine:
        raise CertsError(f"{p.key}: not the key of {p.cert}; give each certificate its own key")
    return p


_SPKI = (serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _write(directory: int, name: str, data: bytes, mode: int) -> None:
    """``data`` as ``name`` in the open ``directory``: a new file of its own (O_EXCL, no
    link followed), ``mode`` exactly, renamed over whatever stood at the name (a symbolic
    or hard link is replaced, never written through)."""
    tmp = f".{name}.{secrets.token_hex(6)}"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(tmp, flags, mode, dir_fd=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), mode)  # not narrowed or widened by the umask
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, name, src_dir_fd=directory, dst_dir_fd=directory)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=directory)
        raise


def _key_bytes(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def make(directory: str | Path) -> list[Path]:
    """A new CA and a certificate per role in ``directory`` (created 0700); the files made.

    Refuses a directory that already holds a CA: a new one would lock out every host
    that trusts the old one.
    """
    d = Path(directory)
    if (d / "ca.pem").exists() or (d / "ca.pem").is_symlink():
        raise CertsError(f"{d / 'ca.pem'} exists; remove the directory to make a new CA")
    try:
        d.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise CertsError(f"{d}: {exc.strerror or exc}") from None
    try:
        return _make(d, fd)
    except OSError as exc:
        raise CertsError(f"{d}: cannot write the certificates: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def _make(d: Path, fd: int) -> list[Path]:
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
    _write(fd, "ca-key.pem", _key_bytes(ca_key), 0o600)
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
        _write(fd, f"{role}-key.pem", _key_bytes(key), 0o600)
        _write(fd, f"{role}.pem", cert.public_bytes(serialization.Encoding.PEM), 0o644)
        made += [d / f"{role}.pem", d / f"{role}-key.pem"]
    # last: a make cut short (a full disk) leaves no CA that would refuse the next one
    _write(fd, "ca.pem", ca.public_bytes(serialization.Encoding.PEM), 0o644)
    return made
