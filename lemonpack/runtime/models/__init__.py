"""The user's models: ``registry`` (``user_models.json``: entries, rules, atomic changes), ``ref`` (a model
argument resolved to a registered model or a file: the one rule of ``run``, ``select`` and ``serve``),
``memory`` (the memory estimate of a model at a launch's options), ``modelcar`` (a model's files as a
runnable image under ``/models``). Imports ``runtime.launch``,
``runtime.recipes``, ``runtime.selection``."""
