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


def _authorities(scope) -> list[dict[str, Any]]:
    reqs = scope.requirements
    if any(isinstance(r, Reject) for r in reqs):
        return [{"name": "reject", "static": {"action": "fail"}}]
    signed = [r for r in reqs if isinstance(r, SigstoreSigned)]
    other = [r for r in reqs if not isinstance(r, (InsecureAcceptAnything, SigstoreSigned))]
    if other:
        raise KubeError(f"--admission: {scope.label}: {other[0].type} cannot be written as a ClusterImagePolicy")
    if not signed:
        return [{"name": "accept", "static": {"action": "pass"}}]
    if len(signed) > 1:
        raise KubeError(f"--admission: {scope.label}: {len(signed)} signature requirements that must all hold "
                        "cannot be written as ClusterImagePolicy authorities (any one of which admits)")
    req = signed[0]
    if req.identity.type != "matchRepository":
        raise KubeError(f"--admission: {scope.label}: signedIdentity {req.identity.type} cannot be written as a "
                        "ClusterImagePolicy (policy-controller checks cosign's repository identity: "
                        "matchRepository)")
    out = []
    for i, source in enumerate(req.keys):
        pem = key_pem(source)
        out.append({"name": f"key-{i + 1}", "key": {"data": pem, "hashAlgorithm": "sha256"}})
    return out


def cluster_image_policies(generated: Sequence[Generated], trust: Trust | None = None) -> list[dict[str, Any]]:
    """The ``ClusterImagePolicy`` documents for the images of ``generated`` (module doc), in
    scope order, one per matched scope; empty without a policy file (nothing to enforce).
    Raises :class:`KubeError` for a rule that cannot be written, naming the scope."""
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
        by_scope.setdefault(scope.label, (scope, []))[1].append(str(judged))

    docs = []
    for label in sorted(by_scope):
        scope, images = by_scope[label]
        name = "lemonpack-" + Digest.of_bytes(label.encode("utf-8")).hex[:16]
        docs.append({"apiVersion": API_VERSION, "kind": KIND,
                     "metadata": {"name": name, "annotations": {
                         "lemonpack.dev/policy": trust.policy.file, "lemonpack.dev/scope": label}},
                     "spec": {"mode": "enforce", "images": [{"glob": g} for g in sorted(set(images))],
                              "authorities": _authorities(scope)}})
    return docs


HEADER = ("# Generated by `lemonpack kube generate --admission`: sigstore policy-controller ClusterImagePolicy\n"
          "# objects from the trust policy (containers-policy.json) for the images of the generated file.\n")


def render_admission(docs: Sequence[dict[str, Any]]) -> bytes:
    """The documents as a YAML stream (:mod:`lemonpack.kube.yamlout`), after a comment header."""
    from lemonpack.kube.yamlout import dump_all

    return (HEADER + dump_all(docs)).encode("utf-8")


__all__ = ["API_VERSION", "KIND", "cluster_image_policies", "render_admission"]
