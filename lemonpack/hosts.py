"""Host names and addresses, below every room (stdlib only): the one loopback test.

Used wherever lemonpack decides something by "is this loopback": plain HTTP allowed to a
registry or mirror on this machine, ``serve``'s management and metrics routes answered to local
clients only, listen addresses that need no ``--*-any`` flag, ``kube generate --publish``.
"""

from __future__ import annotations

import ipaddress


def is_loopback(host: str | None) -> bool:
    """Whether ``host`` names this machine's loopback interface: ``localhost`` (RFC 6761
    section 6.3, any case, with or without the root's trailing dot), an address in
    127.0.0.0/8 or ``::1`` (RFC 6890), an IPv4-mapped ``::ffff:127.x.y.z``; brackets
    (``[::1]``) and an IPv6 zone (``::1%lo``) are allowed. ``None``, ``""`` and any other
    name (which DNS could point anywhere) are not loopback."""
    if not host:
        return False
    host = host.strip()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    host = host.split("%", 1)[0].rstrip(".").lower()
    if host == "localhost":
        return True
    try:
        addr = ipaddress.ip_address(host)
    except ValueError:
        return False
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    return addr.is_loopback


__all__ = ["is_loopback"]
