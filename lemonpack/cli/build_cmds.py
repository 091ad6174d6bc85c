"""``lemonpack build``: recipes into OCI image layouts and Nix expressions."""

from __future__ import annotations
