"""Distribution through OCI registries: references, a verifying registry client, publish and
pull of OCI layouts, tag-to-digest pinning of recipes (seed 000 sections 8, 13.2).

Modules: :mod:`.reference` (``HOST[:PORT]/REPO[:TAG][@DIGEST]``), :mod:`.auth` (keychains:
credentials from container auth files and helpers), :mod:`.authn` (Basic and Bearer as an
``httpx.Auth``), :mod:`.transport` (httpx, scheme, retries, bounds), :mod:`.answers` (a
registry's error answers), :mod:`.client` (:class:`RegistryClient`: the operations),
:mod:`.download` and :mod:`.upload` (blob bytes hashed as they are received and sent),
:mod:`.transfer` (publish / pull), :mod:`.pin` (``lemonpack pin``), :mod:`.base` (a ``--base``
from a registry).
"""

from lemonpack.registry.auth import Credentials, load_credentials
from lemonpack.registry.client import RegistryClient, TransferStats
from lemonpack.registry.reference import Reference, parse_reference

__all__ = ["Credentials", "load_credentials", "RegistryClient", "TransferStats", "Reference", "parse_reference"]
