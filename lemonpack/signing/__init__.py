"""Signatures in cosign's key-based format: keys, signatures and their verification.

- :mod:`lemonpack.signing.keys`: key files (``cosign.key`` / ``cosign.pub``), pure.
- :mod:`lemonpack.signing.simplesigning`: payload, signature, signature manifest, pure.
- :mod:`lemonpack.signing.remote`: sign / verify an image in a registry (tag fallback).

Installing from a registry is :mod:`lemonpack.builder.ociinstall` (it verifies with
:mod:`.remote`); loading a layout into podman or Docker is :mod:`lemonpack.builder.load`.
"""
