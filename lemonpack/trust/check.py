"""The trust check before every use: the reference resolved to the digest that is then used,
its signatures fetched, the policy's verdict, and the refusal.

:class:`Trust` holds one policy (:mod:`lemonpack.trust.policy`, found as podman finds it or
named by ``--policy``) and one registries.d (:mod:`lemonpack.trust.registriesd`). Its
:meth:`Trust.check` returns the :class:`~lemonpack.trust.requirements.Verdict`;
:meth:`Trust.enforce` raises :class:`~lemonpack.errors.TrustError` (exit 3, one line naming
the reference, the policy file, the scope and the reason) or returns the reference *by the
digest that was judged*: the caller uses that text, never the tag again, so a tag moved after
the check cannot be what is used (LocalAI's "close the TOCTOU window"). The uses:
``run``/``serve`` (:func:`enforce_argv`: every image a container argv names),
``pull``, ``install oci://``, ``kube generate``, and ``oci://`` model references
(:func:`enforce_reference`, for the model code).

With no policy file anywhere, nothing is checked (today's behaviour), and that is said once
per process on stderr.

Signatures are read through :func:`lemonpack.signing.remote.fetch_signatures` only when the
matched requirements need them and sigstore attachments are on for the repository.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from lemonpack.errors import LemonpackError, TrustError
from lemonpack.oci.reference import ImageReference, parse_registry_reference
from lemonpack.trust.policy import (KeySource, Policy, Reject, SigstoreSigned, Unsupported, find_policy_file,
                                    load_policy, policy_candidates)
from lemonpack.trust.registriesd import RegistriesD, find_registries_dir, load_registries_dir
from lemonpack.trust.requirements import (Evidence, FoundSignature, Verdict, evaluate, lookup, needs_signatures,
                                          policy_reference)

_SAID: set[str] = set()


def _say_once(text: str) -> None:
    if text not in _SAID:
        _SAID.add(text)
        sys.stderr.write(text + "\n")
        sys.stderr.flush()


def read_key(source: KeySource):
    """The public key of one key source (a PEM file or in-file PEM bytes), or a sentence
    saying why it cannot be used (read at evaluation, as containers/image does)."""
    from lemonpack.signing.keys import decode_public_key

    try:
        data = source.data if source.data is not None else Path(source.path or "").read_bytes()
        return decode_public_key(data, what=source.field if source.data is not None else f"{source.path}")
    except OSError as exc:
        return f"cannot read {source.path}: {exc.strerror or exc}"
    except LemonpackError as exc:
        return str(exc)


def key_pem(source: KeySource) -> str:
    """The PEM text (``PUBLIC KEY``) of one key source, for a policy written elsewhere (the
    cluster's ClusterImagePolicy). Raises :class:`~lemonpack.errors.PolicyFileError` naming
    the field when the key cannot be read."""
    from lemonpack.errors import PolicyFileError
    from lemonpack.signing.keys import encode_public_key

    key = read_key(source)
    if isinstance(key, str):
        raise PolicyFileError(f"{source.field}: {key}")
    return encode_public_key(key).decode("ascii")


@dataclass(frozen=True)
class Trust:
    """A policy and a registries.d to judge references with: ``policy`` (None: no policy file
    anywhere, nothing is checked), ``registries``, ``insecure`` and ``registry_config`` for
    the registry client."""

    policy: Policy | None
    registries: RegistriesD
    insecure: bool = False
    registry_config: str | os.PathLike[str] | None = None

    @classmethod
    def load(cls, policy: str | os.PathLike[str] | None = None, registries_d: str | os.PathLike[str] | None = None,
             *, insecure: bool = False, registry_config: str | os.PathLike[str] | None = None) -> "Trust":
        """The policy named by ``policy`` (``--policy``) or found as podman finds it, and the
        registries.d named or found likewise. Raises :class:`~lemonpack.errors.PolicyFileError`
        for a file that cannot be used (strict: nothing is checked against half a policy)."""
        path = find_policy_file(policy)
        parsed = load_policy(path) if path is not None else None
        return cls(parsed, load_registries_dir(find_registries_dir(registries_d)), insecure, registry_config)

    @classmethod
    def named(cls, policy: str | os.PathLike[str] | None = None, registries_d: str | os.PathLike[str] | None = None,
              *, insecure: bool = False, registry_config: str | os.PathLike[str] | None = None) -> "Trust | None":
        """:meth:`load` when ``--policy`` or ``--registries.d`` names a file (read now: a
        missing or malformed file named by the user fails before anything starts); None when
        neither does, so each use loads the default places only when it has an image to judge
        (a plan that runs no container reads no policy). Raises what :meth:`load` raises."""
        if policy is None and registries_d is None:
            return None
        return cls.load(policy, registries_d, insecure=insecure, registry_config=registry_config)

    def check(self, reference: str, *, client=None) -> Verdict:
        """The verdict for ``reference`` (``[oci://]HOST[:PORT]/REPO[:TAG|@sha256:HEX]``):
        the scope that matched, each requirement and what it saw, and the digest judged (a
        tag is resolved once, here). Without a policy: allowed, scope ``(no policy)``.
        Raises InvalidReferenceError, FetchError/IntegrityError from the registry."""
        ref = parse_registry_reference(reference)
        judged = policy_reference(ref)
        if self.policy is None:
            return Verdict(True, str(judged), ref.digest, "", "(no policy)", (), "")
        scope = lookup(self.policy, judged)
        on, source = self.registries.attachments(judged)
        if any(isinstance(r, (Reject, Unsupported)) for r in scope.requirements):
            # refused whatever the registry holds: decided without asking it
            return evaluate(self.policy, judged, Evidence(judged.digest, on, source, skipped=True))
        # the keys first: a key that cannot be read refuses the image, naming the key (not
        # "attachments are off"), and no registry is asked. containers/image reads them per
        # signature (prSigstoreSigned.isSignatureAccepted), so with no signature it says "no
        # signature exists": the verdict is the same (refused), the reason here the real fault
        # (skopeo's agreement: tests/scenarios/test_policy_agreement.py, missing-keyPath)
        keys = {k: read_key(k) for r in scope.requirements if isinstance(r, SigstoreSigned) for k in r.keys}
        if any(isinstance(v, str) for v in keys.values()):
            return evaluate(self.policy, judged, Evidence(judged.digest, on, source, keys=keys))
        want_sigs = needs_signatures(scope.requirements)
        if not want_sigs or (judged.digest is not None and not on):
            # nothing to look at in the registry (insecureAcceptAnything only, as containers/image
            # decides it; or a digest with attachments off): no request, so a pull's mirrors and
            # an unreachable registry are the pull's business, not the check's
            return evaluate(self.policy, judged, Evidence(judged.digest, on, source, keys=keys))
        from lemonpack.registry import RegistryClient
        from lemonpack.signing.remote import fetch_signatures, resolve_digest

        c = client if client is not None else RegistryClient(ref.host, insecure=self.insecure,
                                                             registry_config=self.registry_config)
        try:
            digest = judged.digest or resolve_digest(c, ref.repository, judged.tag or "latest")
            found: tuple[FoundSignature, ...] | None = None
            tag = None
            if want_sigs and on:
                tag, layers, other = fetch_signatures(c, ref.repository, digest)
                found = tuple(FoundSignature(payload, layer.signature) for layer, payload in layers)
                found += tuple(FoundSignature(None, None, "other") for _ in range(other))
        finally:
            if client is None:
                c.close()
        return evaluate(self.policy, judged, Evidence(digest, on, source, found, tag, keys))

    def enforce(self, reference: str, *, use: str = "", client=None,
                on_verdict: Callable[[Verdict], None] | None = None) -> str:
        """:meth:`check`, then the reference to use: ``HOST/REPO@sha256:...`` of the judged
        digest (``reference`` unchanged, and a one-time notice on stderr, without a policy).
        ``use`` names what was about to happen (``pull``, ``run``) in the refusal;
        ``on_verdict(verdict)`` is called with every verdict reached, accepted or not (the
        server's status page shows it; not called without a policy: no check ran). Raises
        :class:`~lemonpack.errors.TrustError` when the policy rejects it."""
        if self.policy is None:
            where = " or ".join(str(p) for p in policy_candidates())
            _say_once(f"note: no containers-policy.json ({where}): images and models are used without a "
                      "trust check (lemonpack policy check explains one)")
            return reference
        verdict = self.check(reference, client=client)
        if on_verdict is not None:
            on_verdict(verdict)
        if not verdict.allowed:
            raise TrustError((f"{use}: " if use else "") + verdict.line(), verdict.to_json())
        ref = parse_registry_reference(reference)
        return str(ref.with_ref(digest=verdict.digest)) if verdict.digest else reference

    def enforce_image(self, image: str, *, use: str = "", on_verdict: Callable[[Verdict], None] | None = None) -> str:
        """:meth:`enforce` for an image named in a command line or a pod: an image without a
        registry host (a local name podman resolves in its own store, ``localhost/x``) is
        returned as it is (no ``docker`` scope judges it)."""
        if registry_reference(image) is None:
            return image
        return self.enforce(image, use=use, on_verdict=on_verdict)


def enforce_reference(reference: str, *, use: str = "model", policy: str | os.PathLike[str] | None = None,
                      registries_d: str | os.PathLike[str] | None = None, insecure: bool = False,
                      registry_config: str | os.PathLike[str] | None = None, client=None) -> str:
    """The one call for code that is about to use a registry reference (an ``oci://`` model
    checkpoint, an engine image): loads the policy (``policy``/``registries_d`` override the
    default places), judges ``reference`` and returns it by the digest judged (use that
    text). Raises :class:`~lemonpack.errors.TrustError` (exit 3) when refused,
    :class:`~lemonpack.errors.PolicyFileError` for a malformed policy."""
    trust = Trust.load(policy, registries_d, insecure=insecure, registry_config=registry_config)
    return trust.enforce(reference, use=use, client=client)


def enforce_argv(argv: Sequence[str], trust: "Trust | None" = None, *, use: str = "run",
                 read: Callable | None = None, on_verdict: Callable[[Verdict], None] | None = None) -> tuple[str, ...]:
    """Judge every registry image a container command line names (the positional image of
    ``run``/``create``/``pull``, each ``--mount type=image`` source; read by
    :func:`lemonpack.oci.cmdline.read_container_argv`) and return the argv with each image
    replaced by its judged digest form (an image already pinned stays as written). A
    non-container argv is returned as it is. ``trust``: None loads the default places (only
    when there is an image to judge); ``on_verdict``: as :meth:`Trust.enforce`. Raises :class:`~lemonpack.errors.TrustError`
    before anything is started."""
    from lemonpack.oci.cmdline import read_container_argv

    inv = (read or read_container_argv)(argv)
    if inv is None or not inv.images:
        return tuple(argv)
    trust = trust if trust is not None else Trust.load()
    out = list(argv)
    for index, image in inv.images:
        ref = registry_reference(image)
        if ref is None:
            continue  # a local image name (no registry host): nothing a policy's docker scopes judge
        pinned = trust.enforce_image(image, use=use, on_verdict=on_verdict)
        if not ref.digest:
            out[index] = pinned if out[index] == image else out[index].replace(image, pinned)
    return tuple(out)


def registry_reference(image: str) -> ImageReference | None:
    """``image`` as a registry reference; None for a local name (no registry host, or
    podman's ``localhost/NAME`` for images built here)."""
    try:
        ref = parse_registry_reference(image)
    except LemonpackError:
        return None
    return None if ref.domain == "localhost" else ref


__all__ = ["Trust", "enforce_argv", "enforce_reference", "key_pem", "read_key", "registry_reference"]
