"""Kubernetes names from model names (lemonpack/kube/names.py): object names (DNS-1035, cut and
hashed when long), label values, names that cannot be mapped."""

from __future__ import annotations

import re

import pytest

from lemonpack.kube.names import NameMappingError, label_value, object_name

DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


@pytest.mark.parametrize("model, name", [
    ("user.qwen-0.5b", "qwen-0-5b"), ("user.Qwen3:Q4_K_M.gguf", "qwen3-q4-k-m-gguf"), ("7b-chat", "m-7b-chat"),
    ("user.__x__", "x"), ("phi 2 (Q4)", "phi-2-q4"), ("user.a..b", "a-b"),
])
def test_object_names(model, name):
    assert object_name(model) == name and DNS1035.match(name)


def test_long_names_are_cut_and_hashed_distinctly():
    a, b = "user." + "x" * 80 + "-a", "user." + "x" * 80 + "-b"
    na, nb = object_name(a), object_name(b)
    assert len(na) <= 63 and len(nb) <= 63 and na != nb and DNS1035.match(na)
    assert object_name(a) == na  # deterministic


@pytest.mark.parametrize("model, why", [("user.modèle", "U+00E8"), ("✓", "U+2713"), ("user.---", "no letter or digit"),
                                        ("tab\tname", "U+0009")])
def test_unmappable_names_are_refused(model, why):
    with pytest.raises(NameMappingError, match=re.escape(why)):
        object_name(model)


def test_label_values():
    assert label_value("user.qwen-0.5b") == "user.qwen-0.5b"  # already valid: kept
    assert label_value("a" * 63 + "-") != "a" * 63 + "-" and len(label_value("r" * 64)) <= 63
    assert label_value("x_") == "x"


