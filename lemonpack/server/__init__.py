"""``lemonpack serve``: the HTTP front (aiohttp), capability gating, proxy and management API.

:func:`lemonpack.server.main.run` is the command's one call; :mod:`lemonpack.server.app`
wires the parts (one job per module: docs/architecture.md, "The server room"). Imports
``runtime`` and ``contract`` only.
"""
