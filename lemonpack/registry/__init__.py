"""Distribution through OCI registries: references, a verifying registry client, publish and
pull of OCI layouts, tag-to-digest pinning of recipes (seed 000 sections 8, 13.2).

References (``HOST[:PORT]/REPO[:TAG][@DIGEST]``) are :class:`lemonpack.oci.reference.ImageReference`,
parsed by :func:`lemonpack.oci.reference.parse_registry_reference`. Modules: :mod:`.auth` (keychains:
credentials from container auth files and helpers), :mod:`.authn` (Basic and Bearer as an
``httpx.Auth``), :mod:`.transport` (httpx, scheme, retries, bounds), :mod:`.answers` (a
registry's error answers), :mod:`.client` (:class:`RegistryClient`: the operations),
:mod:`.upload` (upload bodies hashed as they are sent; both directions hash through
:class:`lemonpack.digest.Hasher`),
:mod:`.certsd` (containers-certs.d(5): a registry's own CAs and client certificate),
:mod:`.transfer` (publish / pull), :mod:`.pin` (``lemonpack pin``), :mod:`.base` (a ``--base``
from a registry).
"""

from lemonpack.registry.auth import Credentials, load_credentials
from lemonpack.registry.client import RegistryClient, TransferStats

__all__ = ["Credentials", "load_credentials", "RegistryClient", "TransferStats"]
