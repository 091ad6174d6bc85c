"""The user's models: ``registry`` (``user_models.json``: entries, rules, atomic changes), ``ref`` (a model
argument resolved to a registered model or a file: the one rule of ``run``, ``select`` and ``serve``),
``memory`` (the memory estimate of a model at a launch's options), ``store`` (the content-addressed model
store and its per-model views), ``artifact`` (model-artifact formats: ModelPack, Docker Model Runner,
KitOps, RamaLama; pure), ``index`` (the one model artifact of an image index; pure), ``pull`` (a model artifact from a registry into the store), ``push`` (model
files to a registry as a ModelPack or Docker artifact), ``modelcar`` (a model's files as a runnable image
under ``/models``). Imports ``runtime.launch``, ``runtime.recipes``,
``runtime.selection``."""
