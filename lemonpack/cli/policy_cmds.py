"""``lemonpack policy check REF``: what the trust policy (containers-policy.json(5)) decides.

Prints the verdict for one registry reference, the scope that matched, each requirement of
that scope and what it saw (:mod:`lemonpack.trust`). Exit 0 when the policy accepts the image,
3 when it rejects it (or the policy file cannot be used), as every command that enforces the
policy before a use (``run``, ``serve``, ``pull``, ``install oci://``, ``kube generate``).
"""

from __future__ import annotations

from pathlib import Path

import typer

from lemonpack.cli._app import (HELP_MARKUP, INSECURE_OPTION, JSON_OPTION, POLICY_OPTION, REGISTRIES_D_OPTION,
                                REGISTRY_CONFIG_OPTION, app, console, print_json)

policy_app = typer.Typer(rich_markup_mode=HELP_MARKUP, no_args_is_help=True,
                         help="The trust policy (containers-policy.json) every image and model use is checked against.")
app.add_typer(policy_app, name="policy")


@policy_app.command("check")
def check(ref: str = typer.Argument(..., metavar="HOST[:PORT]/REPO[:TAG|@sha256:HEX]"),
          policy: Path = POLICY_OPTION,
          registries_d: Path = REGISTRIES_D_OPTION,
          insecure: bool = INSECURE_OPTION,
          registry_config: Path = REGISTRY_CONFIG_OPTION,
          json_out: bool = JSON_OPTION) -> int:
    """Say whether the trust policy accepts REF: the verdict, the scope, each requirement."""
    from lemonpack.trust.check import Trust

    trust = Trust.load(policy, registries_d, insecure=insecure, registry_config=registry_config)
    verdict = trust.check(ref)
    if json_out:
        print_json(verdict.to_json())
    else:
        _print_verdict(verdict)
    return 0 if verdict.allowed else 3


def _print_verdict(verdict) -> None:
    """The verdict as lines: the decision, the policy and scope, one line per requirement."""
    word = "accepted" if verdict.allowed else "rejected"
    at = f"@{verdict.digest}" if verdict.digest and "@" not in verdict.reference else ""
    console.print(f"{word}: {verdict.reference}{at}", markup=False)
    console.print(f"policy: {verdict.policy_file or '(none: no containers-policy.json found, nothing is checked)'}",
                  markup=False)
    console.print(f"scope: {verdict.scope}", markup=False)
    for r in verdict.results:
        console.print(f"  {'ok  ' if r.ok else 'FAIL'} {r.type}: {r.saw}", markup=False)
    if not verdict.allowed:
        console.print(f"reason: {verdict.reason}", markup=False)


__all__ = ["check"]
