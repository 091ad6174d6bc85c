"""Kubernetes names and label values derived from model and recipe names, deterministically.

Object names (a Deployment and a Service per model) must be RFC 1035 labels for a Service
(Kubernetes API conventions, "Names": ``[a-z]([-a-z0-9]*[a-z0-9])?``, at most 63 characters;
a Deployment takes the wider RFC 1123 subdomain, so one name valid for both is used). Label
values must be at most 63 characters of ``[A-Za-z0-9._-]`` that begin and end with a letter or a
digit (Kubernetes "Labels and Selectors", syntax and character set).

The mapping of a model name (:func:`object_name`):

1. the ``user.`` prefix of a registered model is dropped (every registered name has it);
2. ASCII letters are lowercased; ASCII digits stay; every run of other printable ASCII
   characters (``.``, ``_``, ``:``, ``+``, ``@``, space ...) becomes one ``-``; leading and
   trailing ``-`` are dropped;
3. a name that then starts with a digit gets the prefix ``m-`` (a Service name must start
   with a letter);
4. a name longer than 63 characters keeps its first 54 and gets ``-`` and the first 8 hex
   digits of the sha256 of the full model name (so two long names that share a prefix still
   differ).

Refused (:class:`NameError_`, naming the character): a character outside printable ASCII
(there is no one obvious spelling of ``é`` or ``✓`` in ``[a-z0-9-]``), and a name with no
letter or digit at all. Two models whose names map to the same object name are refused by
the caller (:func:`lemonpack.kube.generate.generate`) naming both.
"""

from __future__ import annotations

import re

from lemonpack.digest import Digest
from lemonpack.errors import LemonpackError

MAX_NAME = 63
_RUN = re.compile(r"[^a-z0-9]+")
_LABEL_VALUE = re.compile(r"^(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")
_DNS1035 = re.compile(r"^[a-z](?:[-a-z0-9]*[a-z0-9])?$")


class NameMappingError(LemonpackError):
    """A name that cannot be mapped to a Kubernetes name (see the module docstring)."""

    kind = "kube-name"


def _shorten(slug: str, full: str) -> str:
    if len(slug) <= MAX_NAME:
        return slug
    digest = Digest.of_bytes(full.encode("utf-8")).hex[:8]
    return f"{slug[:54].rstrip('-')}-{digest}"


def object_name(model: str) -> str:
    """The Deployment/Service name of model ``model`` (rules in the module docstring): an RFC
    1035 label of at most 63 characters. Raises :class:`NameMappingError` naming the first
    character that cannot be mapped, or saying the name has no letter or digit."""
    text = model.removeprefix("user.")
    for ch in text:
        if not (" " <= ch <= "~"):
            raise NameMappingError(f"character {ch!r} (U+{ord(ch):04X}) has no spelling in a Kubernetes name "
                                   "([a-z0-9-]); rename the model or its file")
    slug = _RUN.sub("-", text.lower()).strip("-")
    if not slug:
        raise NameMappingError(f"name {model!r} has no letter or digit to make a Kubernetes name of")
    if not slug[0].isalpha():
        slug = f"m-{slug}"
    slug = _shorten(slug, model)
    assert _DNS1035.match(slug), slug
    return slug


def label_value(text: str) -> str:
    """``text`` itself when it is a valid label value; else its :func:`object_name`-style
    slug (lowercased, runs of other characters as ``-``, hashed when long). Raises
    :class:`NameMappingError` as :func:`object_name` does."""
    if len(text) <= MAX_NAME and _LABEL_VALUE.match(text):
        return text
    for ch in text:
        if not (" " <= ch <= "~"):
            raise NameMappingError(f"character {ch!r} (U+{ord(ch):04X}) cannot appear in a label value")
    slug = _RUN.sub("-", text.lower()).strip("-")
    if not slug:
        raise NameMappingError(f"{text!r} has no letter or digit to make a label value of")
    return _shorten(slug, text)


def valid_namespace(ns: str) -> bool:
    """True when ``ns`` is a valid namespace name (an RFC 1123 label: ``[a-z0-9]([-a-z0-9]*[a-z0-9])?``,
    at most 63 characters)."""
    return len(ns) <= MAX_NAME and re.fullmatch(r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?", ns) is not None


__all__ = ["MAX_NAME", "NameMappingError", "label_value", "object_name", "valid_namespace"]
