"""The policy's decision for one image: the scope lookup and each requirement's evaluation.

Pure: a function of the parsed policy (:mod:`lemonpack.trust.policy`), the reference, and what
:mod:`lemonpack.trust.check` found (the digest, the signatures under the tag fallback, whether
sigstore attachments are on, the public keys read). The reference is containers/image's
``signature/policy_eval.go`` (``requirementsForImageRef``), ``docker/policyconfiguration/naming.go``
(``DockerReferenceIdentity``, ``DockerReferenceNamespaces``), ``signature/policy_reference_match.go``
and ``signature/policy_eval_sigstore.go`` (commit df7e80d2):

- Scopes, most specific first, and only the first match applies (no merging): the exact
  reference (``HOST[:PORT]/REPO:TAG`` or ``...@sha256:HEX``), the repository, each parent
  namespace up to the host[:port], then ``*.DOMAIN`` wildcards of the host without its port
  (``*.b.example.com``, ``*.example.com``, ``*.com``), then the transport's ``""``, then
  ``default``.
- Every requirement of the list must hold. ``sigstoreSigned`` holds when at least one
  signature verifies with one of its keys, its payload names this image's digest, and its
  identity (``critical.identity.docker-reference``) is accepted by ``signedIdentity``. cosign
  writes only the repository there, which ``matchExact`` and ``matchRepoDigestOrExact`` never
  accept (containers-policy.json(5): "only matchRepository and exactRepository can be used to
  accept them"): the verdict says so.
- With sigstore attachments off for the registry (containers-registries.d(5)), no signature is
  read: "A signature was required, but no signature exists", and the verdict names the setting
  that turned them off.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from lemonpack.oci.reference import ImageReference, InvalidReferenceError, parse_reference
from lemonpack.signing import simplesigning as ss
from lemonpack.trust.policy import (Identity, InsecureAcceptAnything, KeySource, Policy, Reject, Requirement,
                                    SigstoreSigned, Unsupported)

DOCKER_HUB = "docker.io"
_SKIPPED = "signatures not looked up"


def normalize(text: str) -> ImageReference | None:
    """``text`` as containers/image's ``reference.ParseNormalizedNamed`` reads it: a name
    without a registry host is on ``docker.io`` (``busybox`` → ``docker.io/library/busybox``).
    ``None`` when it does not parse (such an identity matches nothing)."""
    try:
        ref = parse_reference(text)
    except InvalidReferenceError:
        return None
    domain, path = ref.domain, ref.path
    if domain is None:
        domain = DOCKER_HUB
    if domain == DOCKER_HUB and "/" not in path:
        path = f"library/{path}"
    if domain == "index.docker.io":
        domain = DOCKER_HUB
    return ImageReference(f"{domain}/{path}", domain, path, ref.tag, ref.digest)


def policy_reference(ref: ImageReference) -> ImageReference:
    """The reference a policy judges: normalised (:func:`normalize`); a reference with both a
    tag and a digest is judged (and used) by its digest alone, one with neither gets
    ``:latest`` (containers/image refuses the first and adds the tag to the second)."""
    norm = normalize(str(ref))
    assert norm is not None, f"{ref} parsed once and must parse again"
    if norm.digest is not None:
        return norm.with_ref(digest=norm.digest)
    if norm.tag is None:
        return norm.with_ref(tag="latest")
    return norm


def identity_of(ref: ImageReference) -> str:
    """The policy identity of a judged reference: ``NAME:TAG`` or ``NAME@DIGEST``."""
    return f"{ref.name}@{ref.digest}" if ref.digest else f"{ref.name}:{ref.tag}"


def namespaces_of(ref: ImageReference) -> list[str]:
    """``DockerReferenceNamespaces``: the repository, each parent namespace, the host[:port],
    then the ``*.`` wildcards of the host without its port."""
    out, name = [], ref.name
    while True:
        out.append(name)
        if "/" not in name:
            break
        name = name[: name.rfind("/")]
    if name.startswith("["):
        return out  # an IPv6 literal has no subdomains
    host = name.split(":", 1)[0]
    while "." in host:
        host = host[host.index(".") + 1:]
        out.append(f"*.{host}")
    return out


def scope_candidates(ref: ImageReference) -> list[str]:
    """Every ``transports.docker`` key that could match ``ref``, most specific first (the
    identity, the namespaces, ``""``)."""
    return [identity_of(ref), *namespaces_of(ref), ""]


@dataclass(frozen=True)
class Scope:
    """The matched scope: ``key`` (the ``transports.docker`` key, ``""`` for the transport's
    default, ``None`` for the global ``default``) and ``label`` (how messages name it:
    ``transports.docker["127.0.0.1:5000/engines"]``, ``default``)."""

    key: str | None
    label: str
    requirements: tuple[Requirement, ...]


def lookup(policy: Policy, ref: ImageReference) -> Scope:
    """The requirements that apply to ``ref`` (a :func:`policy_reference`): the most
    specific scope of ``transports.docker`` present, else the global ``default``."""
    import json

    for key in scope_candidates(ref):
        if key in policy.docker:
            return Scope(key, f"transports.docker[{json.dumps(key)}]", policy.docker[key])
    return Scope(None, "default", policy.default)


# --- signedIdentity --------------------------------------------------------------------------

def _name_only(r: ImageReference) -> bool:
    return r.tag is None and r.digest is None


def _string(r: ImageReference) -> str:
    return str(r)


def _repo_digest_or_exact(intended: ImageReference, signature: ImageReference) -> bool:
    if _name_only(signature):
        return False
    if intended.tag is not None:
        return _string(signature) == _string(intended)
    if intended.digest is not None:
        return signature.name == intended.name
    return False


def identity_matches(identity: Identity, intended: ImageReference, signed: str) -> bool:
    """Whether a signature claiming the identity ``signed`` (its payload's
    ``critical.identity.docker-reference``) is accepted for the image ``intended`` (a
    :func:`policy_reference`) by ``identity`` (policy_reference_match.go, case by case)."""
    sig = normalize(signed)
    if sig is None:
        return False
    kind = identity.type
    if kind == "matchExact":
        return not _name_only(intended) and not _name_only(sig) and _string(sig) == _string(intended)
    if kind == "matchRepoDigestOrExact":
        return _repo_digest_or_exact(intended, sig)
    if kind == "matchRepository":
        return sig.name == intended.name
    if kind == "exactReference":
        want = normalize(identity.reference or "")
        return (want is not None and not _name_only(want) and not _name_only(sig)
                and _string(sig) == _string(want))
    if kind == "exactRepository":
        want = normalize(identity.reference or "")
        return want is not None and sig.name == want.name
    if kind == "remapIdentity":
        prefix, signed_prefix = identity.prefix or "", identity.signed_prefix or ""
        name = intended.name
        if name == prefix or (name.startswith(prefix) and name[len(prefix)] == "/"):
            remapped = normalize(str(intended).replace(prefix, signed_prefix, 1))
            if remapped is None:
                return False
            intended = remapped
        return _repo_digest_or_exact(intended, sig)
    raise ValueError(f"unknown identity type {kind!r}")


# --- what check found, and the verdict -------------------------------------------------------

@dataclass(frozen=True)
class FoundSignature:
    """One layer of the image's signature manifest (``sha256-<hex>.sig``): ``payload`` (the
    blob's bytes, or None when it was not read: too large, or not simple-signing), the base64
    ``signature`` annotation (None when missing), ``media_type``."""

    payload: bytes | None
    signature: str | None
    media_type: str = ss.SIMPLESIGNING_MEDIA_TYPE


@dataclass(frozen=True)
class Evidence:
    """What :mod:`lemonpack.trust.check` found for the image: ``digest`` (the manifest digest
    the check judged, then used), ``attachments`` (sigstore attachments on for this
    repository) with ``attachments_source`` (the registries.d file and scope that decided, or
    why none did), ``signatures`` (None: not looked up, as attachments were off or no
    requirement needed them), ``signature_tag``, and ``keys``: ``{KeySource: public key or
    the reason it could not be read}``; ``skipped``: signatures were not looked up because
    another requirement of the scope refuses the image anyway."""

    digest: str | None
    attachments: bool = False
    attachments_source: str = ""
    signatures: tuple[FoundSignature, ...] | None = None
    signature_tag: str | None = None
    keys: Mapping[KeySource, Any] = field(default_factory=dict)
    skipped: bool = False


@dataclass(frozen=True)
class Result:
    """One requirement's outcome: ``type``, ``ok`` and ``saw`` (a sentence: what it checked
    and what it found)."""

    type: str
    ok: bool
    saw: str

    def to_json(self) -> dict[str, Any]:
        """``{"type", "ok", "saw"}``."""
        return {"type": self.type, "ok": self.ok, "saw": self.saw}


@dataclass(frozen=True)
class Verdict:
    """The decision: ``allowed``, the ``reference`` judged (a :func:`policy_reference`,
    as text), its ``digest`` (the one to use), ``policy_file``, ``scope`` (its label),
    ``results`` (every requirement, in order) and ``reason`` (the first failing
    requirement's sentence; ``""`` when allowed)."""

    allowed: bool
    reference: str
    digest: str | None
    policy_file: str
    scope: str
    results: tuple[Result, ...]
    reason: str = ""

    def to_json(self) -> dict[str, Any]:
        """The verdict as JSON (``lemonpack policy check --json``)."""
        return {"allowed": self.allowed, "reference": self.reference, "digest": self.digest,
                "policy": self.policy_file, "scope": self.scope, "reason": self.reason,
                "requirements": [r.to_json() for r in self.results]}

    def line(self) -> str:
        """The one-line rejection: reference, policy file, scope, reason."""
        return (f"{self.reference}: rejected by the trust policy {self.policy_file} "
                f"(scope {self.scope}): {self.reason}")


def needs_signatures(requirements: Sequence[Requirement]) -> bool:
    """Whether evaluating ``requirements`` reads signatures: some ``sigstoreSigned`` that
    would be reached (the list stops at the first reject or unsupported requirement)."""
    for r in requirements:
        if isinstance(r, (Reject, Unsupported)):
            return False
        if isinstance(r, SigstoreSigned):
            return True
    return False


def evaluate(policy: Policy, ref: ImageReference, evidence: Evidence,
             verify: Callable[[Any, bytes, str], bool] = ss.verify_payload) -> Verdict:
    """The verdict for ``ref`` (a :func:`policy_reference`) under ``policy`` given
    ``evidence``. ``verify(public_key, payload, signature_b64)`` checks one signature
    (default: cosign's ECDSA P-256, :func:`lemonpack.signing.simplesigning.verify_payload`)."""
    scope = lookup(policy, ref)
    results: list[Result] = []
    for req in scope.requirements:
        results.append(_evaluate_one(req, scope, ref, evidence, verify, policy.file))
    failing = next((r for r in results if not r.ok and not r.saw.startswith(_SKIPPED)), None)
    failing = failing or next((r for r in results if not r.ok), None)
    return Verdict(failing is None, str(ref), evidence.digest, policy.file, scope.label, tuple(results),
                   failing.saw if failing else "")


def _evaluate_one(req: Requirement, scope: Scope, ref: ImageReference, ev: Evidence,
                  verify: Callable[[Any, bytes, str], bool], policy_file: str) -> Result:
    if isinstance(req, InsecureAcceptAnything):
        return Result(req.type, True, "accepts any image")
    if isinstance(req, Reject):
        return Result(req.type, False, f"{scope.label} rejects every image (\"reject\")")
    if isinstance(req, Unsupported):
        return Result(req.type, False, f"{req.what} in {scope.label} is not supported here: "
                                       "lemonpack cannot check it, so the image is refused")
    return _sigstore(req, scope, ref, ev, verify, policy_file)


def _sigstore(req: SigstoreSigned, scope: Scope, ref: ImageReference, ev: Evidence,
              verify: Callable[[Any, bytes, str], bool], policy_file: str) -> Result:
    keys = ", ".join(k.field for k in req.keys)
    if ev.skipped:
        return Result(req.type, False, f"{_SKIPPED} (another requirement of the scope refuses the image)")
    unreadable = [(k, v) for k, v in ev.keys.items() if k in req.keys and isinstance(v, str)]
    if unreadable:  # containers/image fails on any key of the requirement it cannot read (prepareTrustRoot)
        what = "; ".join(f"{k.field}: {v}" for k, v in unreadable)
        return Result(req.type, False, f"the public key of {scope.label} in {policy_file} cannot be used "
                                       f"({what}), so no signature can be checked")
    if not ev.attachments:
        return Result(req.type, False, "A signature was required, but no signature exists: sigstore attachments "
                                       f"are off for this registry ({ev.attachments_source}); "
                                       "set use-sigstore-attachments: true in containers-registries.d(5)")
    sigs = ev.signatures or ()
    candidates = [s for s in sigs if s.media_type == ss.SIMPLESIGNING_MEDIA_TYPE]
    if not candidates:
        other = len(sigs) - len(candidates)
        extra = f" ({other} sigstore non-signature attachments)" if other else ""
        where = f" under {ev.signature_tag}" if ev.signature_tag else ""
        return Result(req.type, False, f"A signature was required, but no signature exists{where}{extra}")
    usable = {k: v for k, v in ev.keys.items() if k in req.keys and not isinstance(v, str)}
    reasons: list[str] = []
    for i, s in enumerate(candidates, 1):
        label = f"signature {i}"
        if s.signature is None:
            reasons.append(f"{label}: missing {ss.SIGNATURE_ANNOTATION} annotation")
            continue
        if s.payload is None:
            reasons.append(f"{label}: payload not read (too large)")
            continue
        signer = next((k for k in req.keys if k in usable and verify(usable[k], s.payload, s.signature)), None)
        if signer is None:
            reasons.append(f"{label}: made by none of the {len(req.keys)} expected keys ({keys})")
            continue
        try:
            claims = ss.parse_payload(s.payload)
        except ss.PayloadError as exc:
            reasons.append(f"{label}: verifies with {signer.field} but its payload is not simple-signing: {exc}")
            continue
        if claims.image_digest != ev.digest:
            reasons.append(f"{label}: verifies with {signer.field} but signs {claims.image_digest}, "
                           f"not this image's {ev.digest}")
            continue
        if not identity_matches(req.identity, ref, claims.docker_reference):
            hint = ""
            sig = normalize(claims.docker_reference)
            if sig is not None and _name_only(sig) and req.identity.type in ("matchExact", "matchRepoDigestOrExact"):
                hint = (" (cosign signatures carry only a repository: use signedIdentity matchRepository "
                        "or exactRepository to accept them)")
            reasons.append(f"{label}: verifies with {signer.field}, but its identity "
                           f"{claims.docker_reference!r} is not accepted by {req.identity.type} for {ref}{hint}")
            continue
        return Result(req.type, True, f"signature {i} of {len(candidates)} verifies with {signer.field}, signs "
                                      f"{ev.digest}, identity {claims.docker_reference!r} accepted by "
                                      f"{req.identity.type}")
    if len(reasons) == 1:
        return Result(req.type, False, reasons[0])
    return Result(req.type, False, "None of the signatures were accepted: " + "; ".join(reasons))


__all__ = ["Evidence", "FoundSignature", "Result", "Scope", "Verdict", "evaluate", "identity_matches",
           "identity_of", "lookup", "namespaces_of", "needs_signatures", "normalize", "policy_reference",
           "scope_candidates"]
