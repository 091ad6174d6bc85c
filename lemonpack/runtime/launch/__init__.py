"""Launch plans (RFC sections 4, 7): a recipe, a model and the host become a ``LaunchPlan`` (argv, env, cwd).

``plan`` (the ``LaunchPlan`` type), ``build`` (``build_launch_plan``), ``options`` (the one merge of launch options: recipe defaults,
registered-model options, load options), ``tokens`` (token values at load
time), ``customargs`` (the ``{custom_args}`` policy), ``engine_flags`` (engines' flag tables), ``envallow``
(the environment allowlist), ``builtin`` (the argv of a ``variant_of`` built-in), ``modelfiles`` (the model a
plan is built for and the checks of this machine's files). Imports no other runtime sub-room."""
