"""``lemonpack serve``: the HTTP front (aiohttp), capability gating, proxy and management API.

:func:`lemonpack.server.main.run` is the command's one call; :mod:`lemonpack.server.app`
wires the parts (one job per module: docs/architecture.md, "The server room"). Imports
``runtime``, ``contract`` and ``trust`` only (``trust``: the ``--policy``/``--registries.d``
files :func:`~lemonpack.server.main.run` loads for the runner).
"""
