"""The build pipeline: recipe → verified artifacts → OCI image layout + Nix expression.

:func:`lemonpack.build.pipeline.build` is the main job of ``lemonpack build``;
:func:`lemonpack.build.checks.lint_problems` what ``lemonpack lint`` reports (contract + policy).
"""
