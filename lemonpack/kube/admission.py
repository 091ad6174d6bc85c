"""The cluster enforces what this machine enforces: sigstore policy-controller
``ClusterImagePolicy`` objects from the trust policy's rules for the images a ``kube generate``
file names (``kube generate --admission FILE``).

For each image of the file (every engine image, every OCI model artifact; all pinned by
digest), the scope the trust policy matched (:func:`lemonpack.trust.requirements.lookup`, most
specific first) decides its authorities; images of one scope share one object. The objects
follow policy-controller's CRD (``config/300-clusterimagepolicy.yaml`` of
sigstore/policy-controller, ``policy.sigstore.dev/v1beta1``):

- ``spec.images[].glob``: the image reference itself (``HOST/REPO@sha256:HEX``).
  policy-controller matches a glob against the whole reference (``ref.Name()``, tag or digest
  included; ``*`` any run without ``/``, ``**`` anything), so an exact reference is a glob
  that matches exactly that image, with no other policy's scope leaking in (policy-controller
  requires *every* matching policy to pass, where containers-policy.json applies only the most
  specific scope: one glob per judged image keeps the two decisions the same).
- ``insecureAcceptAnything`` → ``static: {action: pass}``; ``reject`` → ``static: {action:
  fail}``; ``sigstoreSigned`` with keys → one ``key`` authority per public key (inline PEM,
  ``hashAlgorithm: sha256``): policy-controller admits an image when one authority holds, as
  any one key of the requirement does.
- What policy-controller cannot say as containers/image means it is refused with a
  :class:`~lemonpack.kube.generate.KubeError` naming the scope (nothing written): two signature
  requirements in one scope (AND), an identity other than ``matchRepository`` (cosign, and so
  policy-controller, checks the signature's repository against the image's), and the
  requirement types lemonpack does not support.
- ``spec.mode: enforce``. No ``ctlog`` is written: the signatures lemonpack makes are key-based
  with no transparency-log entry (how a policy-controller release treats a key authority
  without ``ctlog`` is its own: read its documentation before relying on it).

``--admission-format kyverno`` writes the same decisions as one Kyverno ``ClusterPolicy``
(``kyverno.io/v1``; :func:`kyverno_policies`), following Kyverno's CRD
(``config/crds/kyverno/kyverno.io_clusterpolicies.yaml`` of kyverno/kyverno, read at commit
111e07bb) and its code (``pkg/utils/image/infos.go``, ``pkg/engine/utils/image.go``,
``pkg/engine/internal/imageverifier.go``, ``api/kyverno/v1/image_verification_types.go``):

- one rule per scope that requires a signature, matching Pods (Kyverno's auto-generation
  extends a Pod rule to Deployments), with one ``verifyImages`` entry: ``imageReferences`` the
  images of that scope exactly as the pods name them (``HOST/REPO@sha256:HEX``: Kyverno matches
  its glob against ``registry/path@digest`` of the image, with ``*``/``?`` wildcards, and the
  references hold neither), ``failureAction: Enforce`` (and ``spec.validationFailureAction:
  Enforce`` for releases before the per-rule field; ``mutateDigest`` is refused with Audit),
  ``mutateDigest``, ``verifyDigest`` and ``required`` true;
- ``attestors``: one set with ``count: 1`` and one ``keys`` entry per public key of the
  requirement (Kyverno: "if the count is 1, at least one entry must match", as any one key of
  ``keyPaths``/``keyDatas`` does), each ``rekor: {ignoreTlog: true}`` and ``ctlog: {ignoreSCT:
  true}`` (without ``rekor`` Kyverno checks the public Rekor log, where lemonpack's key-based
  signatures have no entry);
- a scope that accepts anything needs no rule (Kyverno admits an image no rule matches); a
  scope that rejects, or a rule Kyverno cannot say (as for policy-controller above), is refused
  with a :class:`KubeError` naming the scope. No image of a rejecting scope reaches this point:
  ``kube generate`` refuses the file first. When no scope needs a signature, nothing but the
  header is written.
"""

from __future__ import annotations

from typing import Any, Sequence

from lemonpack.digest import Digest
from lemonpack.kube.generate import Generated, KubeError, image_references
from lemonpack.trust.check import Trust, key_pem, registry_reference
from lemonpack.trust.policy import InsecureAcceptAnything, Reject, SigstoreSigned
from lemonpack.trust.requirements import lookup, policy_reference

API_VERSION = "policy.sigstore.dev/v1beta1"
KIND = "ClusterImagePolicy"
KYVERNO_API_VERSION = "kyverno.io/v1"
KYVERNO_KIND = "ClusterPolicy"
#: ``--admission-format`` values: what the admission file holds.
FORMATS = ("cluster-image-policy", "kyverno")


def _authorities(scope, target: str = "a ClusterImagePolicy") -> list[dict[str, Any]]:
    reqs = scope.requirements
    if any(isinstance(r, Reject) for r in reqs):
        return [{"name": "reject", "static": {"action": "fail"}}]
    signed = [r for r in reqs if isinstance(r, SigstoreSigned)]
    other = [r for r in reqs if not isinstance(r, (InsecureAcceptAnything, SigstoreSigned))]
    if other:
        raise KubeError(f"--admission: {scope.label}: {other[0].type} cannot be written as {target}")
    if not signed:
        return [{"name": "accept", "static": {"action": "pass"}}]
    if len(signed) > 1:
        raise KubeError(f"--admission: {scope.label}: {len(signed)} signature requirements that must all hold "
                        f"cannot be written as {target} (lemonpack writes one signature rule per scope, "
                        "any one key of which admits)")
    req = signed[0]
    if req.identity.type != "matchRepository":
        raise KubeError(f"--admission: {scope.label}: signedIdentity {req.identity.type} cannot be written as "
                        f"{target} (cosign's signatures, which the cluster checks, carry the repository: "
                        "matchRepository)")
    out = []
    for i, source in enumerate(req.keys):
        pem = key_pem(source)
        out.append({"name": f"key-{i + 1}", "key": {"data": pem, "hashAlgorithm": "sha256"}})
    return out


def _by_scope(generated: Sequence[Generated], trust: Trust | None, *, as_written: bool = False
              ) -> tuple[Trust, dict[str, tuple[Any, list[str]]]]:
    """``(trust, {scope label: (scope, [image])})`` for the registry images of ``generated``:
    each image as the policy judges it (normalised), or ``as_written`` by the pods (the tag of
    a ``TAG@DIGEST`` reference dropped, as Kyverno's image string does)."""
    trust = trust if trust is not None else Trust.load()
    if trust.policy is None:
        raise KubeError("--admission: no containers-policy.json found (nothing to enforce on the cluster)")
    by_scope: dict[str, tuple[Any, list[str]]] = {}
    for _model, image in image_references(generated):
        ref = registry_reference(image)
        if ref is None:
            continue  # a local image name: no docker scope judges it
        judged = policy_reference(ref)
        scope = lookup(trust.policy, judged)
        shown = str(ref.with_ref(digest=ref.digest)) if as_written and ref.digest else str(judged)
        by_scope.setdefault(scope.label, (scope, []))[1].append(shown)
    return trust, by_scope


def _name(label: str) -> str:
    return "lemonpack-" + Digest.of_bytes(label.encode("utf-8")).hex[:16]


def cluster_image_policies(generated: Sequence[Generated], trust: Trust | None = None) -> list[dict[str, Any]]:
    """The ``ClusterImagePolicy`` documents for the images of ``generated`` (module doc), in
    scope order, one per matched scope. Raises :class:`KubeError` for a rule that cannot be
    written, naming the scope, or without a policy file (nothing to enforce)."""
    trust, by_scope = _by_scope(generated, trust)
    assert trust.policy is not None
    docs = []
    for label in sorted(by_scope):
        scope, images = by_scope[label]
        name = _name(label)
        docs.append({"apiVersion": API_VERSION, "kind": KIND,
                     "metadata": {"name": name, "annotations": {
                         "lemonpack.dev/policy": trust.policy.file, "lemonpack.dev/scope": label}},
                     "spec": {"mode": "enforce", "images": [{"glob": g} for g in sorted(set(images))],
                              "authorities": _authorities(scope)}})
    return docs


def _signed(scope) -> SigstoreSigned | None:
    """The one signature requirement of ``scope`` Kyverno enforces, None when it accepts
    anything; :class:`KubeError` naming the scope for what Kyverno cannot say."""
    if any(isinstance(r, Reject) for r in scope.requirements):
        raise KubeError(f"--admission: {scope.label}: reject cannot be written as a Kyverno verifyImages rule")
    _authorities(scope, "a Kyverno verifyImages rule")  # the same refusals as for policy-controller (AND, identity, unsupported)
    return next((r for r in scope.requirements if isinstance(r, SigstoreSigned)), None)


def kyverno_policies(generated: Sequence[Generated], trust: Trust | None = None) -> list[dict[str, Any]]:
    """One Kyverno ``ClusterPolicy`` (module doc) with a ``verifyImages`` rule per scope of the
    images of ``generated`` that requires a signature, in scope order; empty when none does.
    Raises :class:`KubeError` for a rule that cannot be written, naming the scope, or
    without a policy file."""
    trust, by_scope = _by_scope(generated, trust, as_written=True)
    assert trust.policy is not None
    rules, scopes = [], []
    for label in sorted(by_scope):
        scope, images = by_scope[label]
        req = _signed(scope)
        if req is None:
            continue
        entries = [{"keys": {"publicKeys": key_pem(k), "rekor": {"ignoreTlog": True}, "ctlog": {"ignoreSCT": True}}}
                   for k in req.keys]
        rules.append({"name": _name(label), "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
                      "verifyImages": [{"imageReferences": sorted(set(images)), "failureAction": "Enforce",
                                        "mutateDigest": True, "verifyDigest": True, "required": True,
                                        "attestors": [{"count": 1, "entries": entries}]}]})
        scopes.append(f"{_name(label)}: {label}")
    if not rules:
        return []
    return [{"apiVersion": KYVERNO_API_VERSION, "kind": KYVERNO_KIND,
             "metadata": {"name": "lemonpack-verify-images", "annotations": {
                 "lemonpack.dev/policy": trust.policy.file, "lemonpack.dev/scopes": "\n".join(scopes)}},
             "spec": {"validationFailureAction": "Enforce", "background": False, "rules": rules}}]


def admission_documents(generated: Sequence[Generated], trust: Trust | None = None,
                        fmt: str = "cluster-image-policy") -> list[dict[str, Any]]:
    """The admission objects of ``--admission-format`` ``fmt`` (:data:`FORMATS`):
    :func:`cluster_image_policies` or :func:`kyverno_policies`. Raises
    :class:`~lemonpack.errors.UsageError` (exit 2) for another format."""
    if fmt == "kyverno":
        return kyverno_policies(generated, trust)
    if fmt == "cluster-image-policy":
        return cluster_image_policies(generated, trust)
    from lemonpack.errors import UsageError

    raise UsageError(f"{fmt!r} is not one of {', '.join(FORMATS)}", param="--admission-format")


HEADER = ("# Generated by `lemonpack kube generate --admission`: {what}\n"
          "# from the trust policy (containers-policy.json) for the images of the generated file.\n")
WHAT = {"cluster-image-policy": "sigstore policy-controller ClusterImagePolicy objects",
        "kyverno": "a Kyverno ClusterPolicy (verifyImages)"}


def render_admission(docs: Sequence[dict[str, Any]], fmt: str = "cluster-image-policy") -> bytes:
    """The documents as a YAML stream (:mod:`lemonpack.kube.yamlout`), after a comment header
    (and a line saying so when no image needs a signature)."""
    from lemonpack.kube.yamlout import dump_all

    head = HEADER.format(what=WHAT.get(fmt, fmt))
    if not docs:
        return (head + "# No image of the file needs a signature under the policy: nothing to enforce.\n").encode()
    return (head + dump_all(docs)).encode("utf-8")


__all__ = ["API_VERSION", "FORMATS", "KIND", "KYVERNO_API_VERSION", "KYVERNO_KIND", "admission_documents",
           "cluster_image_policies", "kyverno_policies", "render_admission"]
