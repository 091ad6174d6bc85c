"""``lemonpack serve``: the HTTP front (aiohttp), capability gating, proxy and management API.

:mod:`lemonpack.server.catalog` binds registered models to discovered recipes;
:mod:`lemonpack.server.app` is the aiohttp application. Imports runtime and contract only.
"""
