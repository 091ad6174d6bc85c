"""The trust policy: containers-policy.json(5) checked before any engine image or model is used.

- :mod:`lemonpack.trust.policy`: the policy file found as podman finds it and read strictly
  into typed requirements.
- :mod:`lemonpack.trust.registriesd`: containers-registries.d(5), ``use-sigstore-attachments``
  per scope.
- :mod:`lemonpack.trust.requirements`: the scope lookup (most specific first, no merging) and
  each requirement's evaluation; pure.
- :mod:`lemonpack.trust.check`: the I/O: the reference resolved to the digest then used, its
  signatures fetched through :mod:`lemonpack.signing.remote`, the verdict and the refusal.
"""
