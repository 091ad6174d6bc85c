"""The build pipeline: recipe → verified artifacts → OCI image layout + Nix expression.

:func:`lemonpack.build.pipeline.build` is the main job of ``lemonpack build``;
:func:`lemonpack.build.checks.pinning_problems` the digest-pinning policy it enforces.
"""
