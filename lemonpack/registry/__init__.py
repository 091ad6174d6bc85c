"""Distribution through OCI registries: references, a verifying registry client, publish and
pull of OCI layouts, tag-to-digest pinning of recipes (seed 000 sections 8, 13.2).

Modules: :mod:`.reference` (``HOST[:PORT]/REPO[:TAG][@DIGEST]``), :mod:`.auth` (credentials
from container auth files), :mod:`.client` (:class:`RegistryClient`, on oras' HTTP layer),
:mod:`.transfer` (publish / pull), :mod:`.pin` (``lemonpack pin``).
"""

from lemonpack.registry.auth import Credentials, load_credentials
from lemonpack.registry.client import RegistryClient, TransferStats
from lemonpack.registry.reference import Reference, parse_reference

__all__ = ["Credentials", "load_credentials", "RegistryClient", "TransferStats", "Reference", "parse_reference"]
