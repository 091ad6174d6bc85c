"""Signatures in cosign's key-based format, loading images into container engines, and
installs from a registry.

- :mod:`lemonpack.signing.keys`: key files (``cosign.key`` / ``cosign.pub``), pure.
- :mod:`lemonpack.signing.simplesigning`: payload, signature, signature manifest, pure.
- :mod:`lemonpack.signing.remote`: sign / verify an image in a registry (tag fallback).
- :mod:`lemonpack.signing.engines`: ``lemonpack load`` into podman / Docker through their SDKs.
- :mod:`lemonpack.signing.ociinstall`: ``lemonpack install oci://...`` and ``uninstall``.
"""
