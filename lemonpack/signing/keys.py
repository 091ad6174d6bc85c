"""Cosign key files: ECDSA P-256 key pairs, the private key sealed with a password.

Format (cosign ``pkg/cosign/keys.go`` ``marshalKeyPair``; the envelope is
``github.com/secure-systems-lab/go-securesystemslib/encrypted``, mirrored by sigstore-rs
``src/crypto/signing_key/kdf.rs``):

- ``PREFIX.key``: PEM block ``ENCRYPTED SIGSTORE PRIVATE KEY`` (older cosign wrote
  ``ENCRYPTED COSIGN PRIVATE KEY``; both are read) whose body is the JSON envelope
  ``{"kdf":{"name":"scrypt","params":{"N":65536,"r":8,"p":1},"salt":B64},
  "cipher":{"name":"nacl/secretbox","nonce":B64},"ciphertext":B64}`` (keys in this order,
  compact, standard base64 with padding). The key of the box is
  ``scrypt(password, salt, N, r, p, 32 bytes)``; the sealed plaintext is the PKCS #8 DER
  of the private key; ``ciphertext`` is NaCl ``secretbox`` output (16-byte Poly1305 tag
  then the XSalsa20 stream ciphertext, no nonce prefix). Salt 32 bytes, nonce 24 bytes.
- ``PREFIX.pub``: PEM ``PUBLIC KEY`` (PKIX SubjectPublicKeyInfo).

``cryptography`` has scrypt but not XSalsa20-Poly1305, so the box is PyNaCl's
``nacl.secret.SecretBox`` (libsodium ``crypto_secretbox``, the same construction as Go's
``golang.org/x/crypto/nacl/secretbox``).
"""

from __future__ import annotations

import base64
import json
import os
from dataclasses import dataclass
from pathlib import Path

import nacl.exceptions
import nacl.secret
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.kdf.scrypt import Scrypt

from lemonpack.files import replace_file
from lemonpack.errors import LemonpackError, OutputError, StorageError

SIGSTORE_PEM_TYPE = "ENCRYPTED SIGSTORE PRIVATE KEY"
COSIGN_PEM_TYPE = "ENCRYPTED COSIGN PRIVATE KEY"
PUBLIC_PEM_TYPE = "PUBLIC KEY"

#: scrypt parameters cosign writes today (go-securesystemslib ``encrypted``: N=2^16, r=8, p=1).
SCRYPT_N, SCRYPT_R, SCRYPT_P = 65536, 8, 1
#: Largest N accepted when reading (older cosign wrote 32768): a key file must not make us
#: allocate gigabytes (scrypt needs 128 * N * r bytes).
SCRYPT_MAX_N = 1 << 20
SALT_SIZE, NONCE_SIZE, KEY_SIZE = 32, 24, 32

#: The environment variables a key password is read from, in order: lemonpack's own, then
#: cosign's (``cmd/cosign/cli/generate`` ``readPasswordFn``: ``COSIGN_PASSWORD``, set even
#: when empty, is the password; only without it does cosign prompt).
PASSWORD_VARIABLES = ("LEMONPACK_PASSWORD", "COSIGN_PASSWORD")


def password_from_env(environ: dict[str, str] | None = None) -> tuple[str, bytes] | None:
    """``(variable, password)`` from the first of :data:`PASSWORD_VARIABLES` that is set
    (an empty value is an empty password, as cosign reads ``COSIGN_PASSWORD``), or ``None``
    when neither is (the caller prompts on a terminal). UTF-8 bytes, as Go's ``[]byte(pw)``."""
    env = os.environ if environ is None else environ
    for var in PASSWORD_VARIABLES:
        value = env.get(var)
        if value is not None:
            return var, value.encode("utf-8")
    return None


class KeyFileError(LemonpackError):
    """A key file is malformed, of an unsupported type, or the password is wrong (exit 1)."""

    kind = "key"


@dataclass(frozen=True)
class KeyPairBytes:
    """The two files of a key pair: ``private_pem`` (encrypted) and ``public_pem``, both bytes."""

    private_pem: bytes
    public_pem: bytes


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: object, what: str) -> bytes:
    if not isinstance(text, str):
        raise KeyFileError(f"{what}: expected a base64 string")
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (ValueError, UnicodeEncodeError):
        raise KeyFileError(f"{what}: not valid base64") from None


def _scrypt(password: bytes, salt: bytes, n: int, r: int, p: int) -> bytes:
    return Scrypt(salt=salt, length=KEY_SIZE, n=n, r=r, p=p).derive(password)


def encrypt_envelope(plaintext: bytes, password: bytes, *, salt: bytes | None = None,
                     nonce: bytes | None = None) -> bytes:
    """Seal ``plaintext`` with ``password`` into the go-securesystemslib ``encrypted`` JSON
    envelope (see the module doc); returns the JSON bytes (compact, cosign's key order).
    ``salt`` (32 bytes) and ``nonce`` (24 bytes) default to fresh random values; tests pass
    fixed ones to get fixed bytes."""
    salt = os.urandom(SALT_SIZE) if salt is None else salt
    nonce = os.urandom(NONCE_SIZE) if nonce is None else nonce
    if len(salt) != SALT_SIZE or len(nonce) != NONCE_SIZE:
        raise ValueError("salt must be 32 bytes and nonce 24 bytes")
    key = _scrypt(password, salt, SCRYPT_N, SCRYPT_R, SCRYPT_P)
    sealed = nacl.secret.SecretBox(key).encrypt(plaintext, nonce).ciphertext
    doc = {"kdf": {"name": "scrypt", "params": {"N": SCRYPT_N, "r": SCRYPT_R, "p": SCRYPT_P},
                   "salt": _b64(salt)},
           "cipher": {"name": "nacl/secretbox", "nonce": _b64(nonce)},
           "ciphertext": _b64(sealed)}
    return json.dumps(doc, separators=(",", ":")).encode("ascii")


def decrypt_envelope(data: bytes, password: bytes, *, what: str = "key") -> bytes:
    """Open a go-securesystemslib ``encrypted`` envelope with ``password``; returns the
    plaintext. Raises :class:`KeyFileError` naming ``what`` and the field for a malformed
    envelope, an unknown kdf/cipher, scrypt parameters out of range, or a wrong password
    (the box's authenticator does not match)."""
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        raise KeyFileError(f"{what}: the encrypted key is not the JSON envelope cosign writes") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("kdf"), dict) or not isinstance(doc.get("cipher"), dict):
        raise KeyFileError(f"{what}: the envelope lacks kdf / cipher objects")
    kdf, cipher = doc["kdf"], doc["cipher"]
    if kdf.get("name") != "scrypt":
        raise KeyFileError(f"{what}: kdf.name: unsupported key derivation {kdf.get('name')!r} (expected 'scrypt')")
    if cipher.get("name") != "nacl/secretbox":
        raise KeyFileError(f"{what}: cipher.name: unsupported cipher {cipher.get('name')!r} (expected 'nacl/secretbox')")
    params = kdf.get("params")
    if not isinstance(params, dict):
        raise KeyFileError(f"{what}: kdf.params: missing")
    n, r, p = params.get("N"), params.get("r"), params.get("p")
    if not (isinstance(n, int) and isinstance(r, int) and isinstance(p, int)) \
            or any(isinstance(v, bool) for v in (n, r, p)) or n < 2 or n & (n - 1) or n > SCRYPT_MAX_N or not 1 <= r <= 32 or not 1 <= p <= 16:
        raise KeyFileError(f"{what}: kdf.params: scrypt parameters out of range (N={n!r}, r={r!r}, p={p!r})")
    salt = _unb64(kdf.get("salt"), f"{what}: kdf.salt")
    nonce = _unb64(cipher.get("nonce"), f"{what}: cipher.nonce")
    sealed = _unb64(doc.get("ciphertext"), f"{what}: ciphertext")
    if len(nonce) != NONCE_SIZE:
        raise KeyFileError(f"{what}: cipher.nonce: expected {NONCE_SIZE} bytes, got {len(nonce)}")
    key = _scrypt(password, salt, n, r, p)
    try:
        return nacl.secret.SecretBox(key).decrypt(sealed, nonce)
    except nacl.exceptions.CryptoError:
        raise KeyFileError(f"{what}: wrong password (the sealed key does not open with it)") from None


def _pem(block_type: str, body: bytes) -> bytes:
    b64 = _b64(body)
    lines = [b64[i:i + 64] for i in range(0, len(b64), 64)]
    return (f"-----BEGIN {block_type}-----\n" + "\n".join(lines) + f"\n-----END {block_type}-----\n").encode("ascii")


def _unpem(data: bytes, what: str) -> tuple[str, bytes]:
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError:
        raise KeyFileError(f"{what}: not a PEM file") from None
    start = text.find("-----BEGIN ")
    if start < 0:
        raise KeyFileError(f"{what}: not a PEM file (no BEGIN line)")
    head_end = text.find("-----", start + 11)
    block_type = text[start + 11:head_end]
    end = text.find(f"-----END {block_type}-----", head_end)
    if head_end < 0 or end < 0:
        raise KeyFileError(f"{what}: not a PEM file (no END line for {block_type!r})")
    body = "".join(text[head_end + 5:end].split())
    return block_type, _unb64(body, f"{what}: PEM body")


def generate_key_pair(password: bytes) -> KeyPairBytes:
    """A fresh ECDSA P-256 key pair as cosign writes it (``cosign generate-key-pair``):
    the PKCS #8 private key sealed with ``password`` (may be empty) in an
    ``ENCRYPTED SIGSTORE PRIVATE KEY`` PEM block, and the ``PUBLIC KEY`` PEM."""
    private = ec.generate_private_key(ec.SECP256R1())
    return encode_key_pair(private, password)


def encode_key_pair(private: ec.EllipticCurvePrivateKey, password: bytes, **envelope_kw) -> KeyPairBytes:
    """``private`` as the two cosign key files (see :func:`generate_key_pair`)."""
    der = private.private_bytes(serialization.Encoding.DER, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    sealed = encrypt_envelope(der, password, **envelope_kw)
    return KeyPairBytes(_pem(SIGSTORE_PEM_TYPE, sealed), encode_public_key(private.public_key()))


def encode_public_key(public: ec.EllipticCurvePublicKey) -> bytes:
    """``public`` as a PEM ``PUBLIC KEY`` (PKIX), what ``cosign.pub`` holds."""
    return public.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


def is_private_key_file(data: bytes) -> bool:
    """Whether ``data`` is an encrypted cosign private key PEM (either block type)."""
    return f"-----BEGIN {SIGSTORE_PEM_TYPE}-----".encode() in data or \
        f"-----BEGIN {COSIGN_PEM_TYPE}-----".encode() in data


def decode_private_key(data: bytes, password: bytes, *, what: str = "key") -> ec.EllipticCurvePrivateKey:
    """Open an encrypted cosign private key file (``ENCRYPTED SIGSTORE PRIVATE KEY`` or
    ``ENCRYPTED COSIGN PRIVATE KEY``) with ``password``. Only ECDSA P-256 keys are
    accepted (what ``lemonpack sign`` produces signatures for). Raises :class:`KeyFileError`."""
    block_type, body = _unpem(data, what)
    if block_type not in (SIGSTORE_PEM_TYPE, COSIGN_PEM_TYPE):
        raise KeyFileError(f"{what}: PEM block {block_type!r} is not an encrypted cosign private key "
                           f"({SIGSTORE_PEM_TYPE!r} or {COSIGN_PEM_TYPE!r})")
    der = decrypt_envelope(body, password, what=what)
    try:
        key = serialization.load_der_private_key(der, password=None)
    except ValueError:
        raise KeyFileError(f"{what}: the decrypted key is not PKCS #8") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey) or key.curve.name != "secp256r1":
        raise KeyFileError(f"{what}: only ECDSA P-256 keys are supported")
    return key


def decode_public_key(data: bytes, *, what: str = "key") -> ec.EllipticCurvePublicKey:
    """A ``PUBLIC KEY`` PEM (PKIX) holding an ECDSA P-256 key. Raises :class:`KeyFileError`."""
    block_type, body = _unpem(data, what)
    if block_type != PUBLIC_PEM_TYPE:
        raise KeyFileError(f"{what}: PEM block {block_type!r} is not a {PUBLIC_PEM_TYPE!r}")
    try:
        key = serialization.load_der_public_key(body)
    except ValueError:
        raise KeyFileError(f"{what}: not a valid public key") from None
    if not isinstance(key, ec.EllipticCurvePublicKey) or key.curve.name != "secp256r1":
        raise KeyFileError(f"{what}: only ECDSA P-256 public keys are supported")
    return key


def refuse_existing(prefix: str | os.PathLike[str]) -> None:
    """Raise :class:`LemonpackError` naming which of ``PREFIX.key`` / ``PREFIX.pub`` exist
    (anything at the path, a dangling symlink included); return when neither does."""
    base = Path(prefix)
    existing = [str(p) for p in (base.with_name(base.name + ".key"), base.with_name(base.name + ".pub"))
                if os.path.lexists(p)]
    if existing:
        verb = "already exists" if len(existing) == 1 else "already exist"
        raise OutputError(f"{' and '.join(existing)} {verb}; refusing to overwrite (use --force)")


def write_key_pair(prefix: str | os.PathLike[str], pair: KeyPairBytes, *, force: bool = False) -> tuple[Path, Path]:
    """Write ``PREFIX.key`` (mode 0600) and ``PREFIX.pub`` (0644); returns both paths.

    Refuses (:class:`LemonpackError`, nothing written) when either exists and ``force`` is
    false. Each file is written to a temporary name in its directory and renamed into place,
    the private one created 0600 from the start (never readable by others, even briefly).
    Raises :class:`StorageError` when the disk refuses."""
    base = Path(prefix)
    key_path, pub_path = base.with_name(base.name + ".key"), base.with_name(base.name + ".pub")
    if not force:
        refuse_existing(base)
    try:
        for path, data, mode in ((key_path, pair.private_pem, 0o600), (pub_path, pair.public_pem, 0o644)):
            replace_file(path, data, mode=mode)  # created 0600, then given mode: never readable early
    except OSError as exc:
        raise StorageError(f"cannot write {base}.key / {base}.pub: {exc.strerror or exc}") from None
    return key_path, pub_path
