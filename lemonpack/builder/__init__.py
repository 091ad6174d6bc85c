"""The build pipeline: recipe → verified artifacts → OCI image layout + Nix expression.

:func:`lemonpack.builder.pipeline.build` is the main job of ``lemonpack build``;
:func:`lemonpack.builder.checks.lint_problems` what ``lemonpack lint`` reports (contract + policy).
"""
