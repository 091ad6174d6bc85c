"""The package's lazy names (lemonpack/oci/__init__.py): each resolves to its module's object on
first use, a name it does not have is an AttributeError, and parsing a reference loads neither
the layout writer nor the layer writer (start-up of ``models pull REF@sha256:...``)."""

from __future__ import annotations

import subprocess
import sys

import pytest

import lemonpack.oci as oci


def test_every_lazy_name_is_its_modules_object():
    import importlib

    for name, module in oci._LAZY.items():
        assert getattr(oci, name) is getattr(importlib.import_module(f"lemonpack.oci.{module}"), name)
        assert name in oci.__all__
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        oci.nope  # noqa: B018


def test_parsing_a_reference_loads_no_writer():
    code = ("import sys; import lemonpack.oci.reference; "
            "print(sorted(m for m in ('lemonpack.oci.layout', 'lemonpack.oci.layer', 'lemonpack.oci.cmdline') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"
