"""Signatures in cosign's key-based format: keys, signatures and their verification.

- :mod:`lemonpack.signing.keys`: key files (``cosign.key`` / ``cosign.pub``), pure.
- :mod:`lemonpack.signing.simplesigning`: payload, signature, signature manifest, pure.
- :mod:`lemonpack.signing.remote`: sign / verify an image in a registry (tag fallback).
- :mod:`lemonpack.signing.dsse`: DSSE envelopes (PAE, sign, parse, verify), pure.
- :mod:`lemonpack.signing.attestations`: cosign's ``sha256-<hex>.att`` attestations, in a
  registry or a layout (the statements of a build are :mod:`lemonpack.builder.attest`).

Installing from a registry is :mod:`lemonpack.builder.ociinstall` (it verifies with
:mod:`.remote`); loading a layout into podman or Docker is :mod:`lemonpack.builder.load`.
"""
