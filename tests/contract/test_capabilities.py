"""The capability registry (RFC section 5) is one table, ``contract.capabilities.CAPABILITIES``:
the recipe schema's capability enum must list exactly its rows, so adding a capability is a
row there, the enum entry in ``recipe-v1.schema.json`` and the schema lock (``scripts/locks.py``);
the server's routes, the runtime's modes and the lint rules are read from the table."""

from __future__ import annotations

import json
from importlib import resources

from lemonpack.contract.capabilities import CAPABILITIES


def test_schema_enum_is_the_registry():
    schema = json.loads(resources.files("lemonpack.contract").joinpath("schema/recipe-v1.schema.json").read_bytes())
    assert schema["$defs"]["capability"]["enum"] == list(CAPABILITIES)

