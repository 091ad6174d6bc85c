"""The build pipeline: recipe → verified artifacts → OCI image layout + Nix expression.

:func:`lemonpack.builder.plan.plan_build` then :func:`~lemonpack.builder.plan.write_build` is every
build (``lemonpack build``, ``publish RECIPE.json``, the catalogue's rebuild), over
:func:`lemonpack.builder.pipeline.build_recipes`; :func:`lemonpack.builder.checks.lint_problems` is
what ``lemonpack lint`` reports (contract + policy).
"""
