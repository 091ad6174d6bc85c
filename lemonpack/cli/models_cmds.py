"""``lemonpack models add|list|remove``: the user model registry (RFC section 10);
``models pull|inspect|push``: model artifacts in OCI registries and the model store
(:mod:`lemonpack.runtime.models.pull`, :mod:`lemonpack.runtime.models.push`, issue 23).

``models pull REF`` pulls a model artifact (CNCF ModelPack, Docker Model Runner v0.1/v0.2,
KitOps, RamaLama) into the store (``$LEMONPACK_CACHE_DIR/models``) and prints the resolved
digest and the directory whose files carry their names; a tag is allowed (the digest is always
printed). ``models inspect REF`` prints the format, facts and files from the manifest and
config alone. ``models push FILE... --to HOST/REPO[:TAG]`` writes a ModelPack artifact (or
Docker's with ``--format docker``), ``--sign KEY`` then signs it as ``publish --sign`` does.
Exit codes: 3 when a byte is not what its digest says (nothing of it is kept), 4 network or
registry, 1 anything else (an artifact that is no model names the media types found).

``models add`` checks that ``--recipe`` names a built-in recipe or a recipe that discovery
currently loads. An unknown id is an error (exit 1) that lists the known ids, and a
rejected one is an error that repeats the rejection reason; ``--force`` registers it
anyway with a warning (for a descriptor that will be installed later). A model that
names a missing recipe would otherwise only fail at load time, far from the typo.

Checkpoints are ``NAME=PATH`` (anything else is a usage error, exit 2, as is a malformed
``--option``). ``PATH`` is an OCI model artifact ``oci://HOST[:PORT]/REPO[:TAG]@sha256:HEX``
(pinned by digest: a tag alone is refused, as for container images, unless ``--pin`` resolves it
now; ``run`` and ``serve`` pull it into the model store on first use), a local file or a hub
reference ``ORG/REPO:FILE``: a value
naming an existing file is local, else one of the hub form is a hub reference (kept as
text), else it is local (:func:`lemonpack.runtime.models.registry.checkpoint_kind`). A local path is
stored absolute (relative to the current directory) and must exist unless ``--force``.
Problems with the arguments name the argument (``NAME``, ``--checkpoint`` ...), not the
registry file.

``--endpoint URL`` (repeatable) registers a model served by engines lemonpack does not spawn
(``lemonpack serve`` is then their gateway); ``--checkpoint`` is then optional. Each URL
must be ``http(s)://HOST:PORT`` without credentials, path or query
(:func:`lemonpack.runtime.models.registry.endpoint_problem`); a bad one is an error naming the model
and ``--endpoint`` (exit 1, nothing written).
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

from lemonpack.cli._app import (HELP_MARKUP, INSECURE_OPTION, JSON_OPTION, POLICY_OPTION, REGISTRIES_D_OPTION,
                                REGISTRY_CONFIG_OPTION, app, console, err_console, print_json)
from lemonpack.errors import LemonpackError, ManifestError, Problem

models_app = typer.Typer(rich_markup_mode=HELP_MARKUP,
                         help="Models registered in user_models.json (name, recipe, checkpoints, options).",
                         no_args_is_help=True)
app.add_typer(models_app, name="models")


def _argument_of(problem: Problem) -> str:
    """The command-line argument an :func:`entry_problems` problem is about."""
    if ".checkpoints" in problem.path:
        return "--checkpoint"
    if ".recipe_options" in problem.path:
        return "--option"
    if ".endpoint" in problem.path:
        return "--endpoint"
    if problem.path.endswith(".recipe"):
        return "--recipe"
    return "NAME"


def _pairs(texts: list[str], parse, what: str, hint: str) -> dict:
    """Parse repeated ``KEY=VALUE`` arguments with ``parse``; a malformed or repeated key
    is a usage error (exit 2) naming the option."""
    out: dict = {}
    for text in texts:
        try:
            key, value = parse(text)
        except LemonpackError as e:
            raise typer.BadParameter(str(e), param_hint=hint) from None
        if key in out:
            raise typer.BadParameter(f"{what} {key!r} given twice", param_hint=hint)
        out[key] = value
    return out


@models_app.command("add")
def models_add(
    name: str = typer.Argument(..., help="Model name, 'user.' followed by letters, digits, '.', '_' or '-'."),
    recipe: str = typer.Option(..., "--recipe", "-r", help="Recipe id the model runs with."),
    checkpoint: list[str] = typer.Option([], "--checkpoint", "-c", metavar="NAME=PATH",
                                         help="A checkpoint NAME=PATH: main=PATH is required; also mmproj=..., "
                                              "draft=... PATH is a local file (stored as an absolute path; it must "
                                              "exist unless --force) or an ORG/REPO:FILE hub reference (kept as "
                                              "text; an existing file of that name counts as local)."),
    option: list[str] = typer.Option([], "--option", "-o", metavar="KEY=VALUE",
                                     help="A recipe option; VALUE is a JSON scalar when it parses as one "
                                          "(4096, true, null, \"0\"), else text."),
    endpoint: list[str] = typer.Option([], "--endpoint", "-e", metavar="URL",
                                       help="An engine lemonpack does not spawn, http(s)://HOST:PORT (repeat for "
                                            "several: requests are balanced); --checkpoint is then optional."),
    backend: str | None = typer.Option(None, "--backend", help="Hard backend override for `lemonpack select` "
                                       "(a recipe id or llama.cpp); LEMONPACK_BACKEND wins over it."),
    replace: bool = typer.Option(False, "--replace", help="Overwrite an existing model of that name."),
    force: bool = typer.Option(False, "--force", help="Register even if the recipe is not discovered or a local "
                                                     "checkpoint file does not exist (yet)."),
    pin: bool = typer.Option(False, "--pin", help="Resolve an oci://HOST/REPO:TAG checkpoint to the digest its tag "
                                                 "names now (a tag alone is refused)."),
    json_out: bool = JSON_OPTION,
) -> int:
    """Register (or with --replace, overwrite) a model in user_models.json."""
    from lemonpack.runtime.models.ref import pin_checkpoint
    from lemonpack.runtime.models.registry import (ModelRegistry, check_model_recipe, checkpoint_kind, entry_problems,
                                          normalize_checkpoint, parse_checkpoint, parse_option)

    checkpoints = _pairs(checkpoint, parse_checkpoint, "checkpoint", "'--checkpoint' / '-c'")
    if pin:  # before the rules: they refuse the tag this resolves
        checkpoints = {k: pin_checkpoint(v) if checkpoint_kind(v) == "oci" else v for k, v in checkpoints.items()}
    options = _pairs(option, parse_option, "option", "'--option' / '-o'")
    registry = ModelRegistry()
    if not checkpoint and not endpoint:
        raise typer.BadParameter("give --checkpoint main=PATH, or --endpoint URL for an engine lemonpack does not "
                                 "spawn", param_hint="'--checkpoint' / '-c'")
    entry_doc: dict = {"recipe": recipe, "recipe_options": options}
    if checkpoint or not endpoint:
        entry_doc["checkpoints"] = checkpoints
    if endpoint:
        entry_doc["endpoints"] = list(endpoint)
    problems = entry_problems(name, entry_doc, "")
    if problems:  # shape first: a bad name should not be reported as an unknown recipe
        bad = [p for p in problems if ".endpoint" in p.path]
        if bad:  # one line: the model, the field, the URL and why
            raise ManifestError([Problem(f"model {name!r}", "--endpoint", bad[0].rule, "; ".join(p.message for p in bad))])
        raise ManifestError([Problem(f"argument {_argument_of(p)}", "", p.rule, p.message) for p in problems])
    for key, ckpt in list(checkpoints.items()):
        if checkpoint_kind(ckpt) in ("hub", "oci"):
            continue
        checkpoints[key] = path = normalize_checkpoint(ckpt)
        if not Path(path).is_file():
            why = f"checkpoint {key!r}: local file {path} " + ("is not a file" if Path(path).exists()
                                                              else "does not exist")
            if not force:
                raise ManifestError([Problem("argument --checkpoint", "", "missing-checkpoint",
                                              why + " (a hub reference is ORG/REPO:FILE; use --force to register it anyway)")])
            err_console.print(f"warning: {why}; registering anyway (--force)", markup=False)
    forced = check_model_recipe(recipe, force=force)
    if forced:
        err_console.print(f"warning: {forced}; registering anyway (--force)", markup=False)
    entry = registry.add(name, recipe, checkpoints, options, replace=replace, backend=backend, endpoints=endpoint)
    if json_out:
        print_json({"name": entry.name, **entry.to_json(), "file": str(registry.path)})
    else:
        console.print(f"registered {entry.name} (recipe {entry.recipe}) in {registry.path}", markup=False)
    return 0


@models_app.command("pin")
def models_pin(
    reference: str = typer.Argument(..., metavar="oci://HOST/REPO[:TAG]",
                                    help="An OCI model artifact named by tag (no tag: latest)."),
    insecure: bool = typer.Option(False, "--insecure", help="Plain http to a registry that is not on loopback."),
    json_out: bool = JSON_OPTION,
) -> int:
    """Print the oci:// reference pinned by the digest its tag names now (for models add -c main=...)."""
    from lemonpack.runtime.models.ref import pin_checkpoint

    pinned = pin_checkpoint(reference, insecure=insecure)
    if json_out:
        print_json({"reference": reference, "pinned": pinned})
    else:
        console.print(pinned, markup=False)
    return 0


@models_app.command("list")
def models_list(json_out: bool = JSON_OPTION) -> int:
    """List registered models."""
    from rich.table import Table
    from rich.text import Text

    from lemonpack.runtime.models.registry import ModelRegistry

    registry = ModelRegistry()
    entries = registry.list()
    if json_out:
        print_json({"file": str(registry.path), "models": [{"name": e.name, **e.to_json()} for e in entries]})
        return 0
    if not entries:
        console.print(f"no models registered in {registry.path}", markup=False)
        return 0
    table = Table(title=str(registry.path), title_justify="left")
    for col in ("name", "recipe", "checkpoints", "options"):
        table.add_column(col, overflow="fold")
    for e in entries:
        where = [f"{k}={v}" for k, v in e.checkpoints.items()] + [f"endpoint={u}" for u in e.endpoints]
        table.add_row(Text(e.name), Text(e.recipe), Text("\n".join(where)),
                      Text("\n".join(f"{k}={json.dumps(v)}" for k, v in e.recipe_options.items())))
    console.print(table)
    return 0


@models_app.command("remove")
def models_remove(name: str = typer.Argument(..., help="Model name (user.*)."), json_out: bool = JSON_OPTION) -> int:
    """Remove a registered model."""
    from lemonpack.runtime.models.registry import ModelRegistry

    registry = ModelRegistry()
    entry = registry.remove(name)
    if json_out:
        print_json({"removed": entry.name, "file": str(registry.path)})
    else:
        console.print(f"removed {entry.name} from {registry.path}", markup=False)
    return 0


PROGRESS_OPTION = typer.Option(None, "--progress/--no-progress",
                               help="Show a progress bar on stderr (default: when stderr is a terminal).")


@models_app.command("pull")
def models_pull(reference: str = typer.Argument(..., metavar="[oci://]HOST[:PORT]/REPO[:TAG|@DIGEST]",
                                                help="The model artifact (a tag is resolved; the digest is printed)."),
                offline: bool = typer.Option(False, "--offline", help="Never contact the registry: only the store."),
                progress: bool = PROGRESS_OPTION, insecure: bool = INSECURE_OPTION,
                registry_config: Path = REGISTRY_CONFIG_OPTION, policy: str | None = POLICY_OPTION,
                registries_d: str | None = REGISTRIES_D_OPTION, json_out: bool = JSON_OPTION) -> int:
    """Pull a model artifact into the model store and print where its files are.

    The trust policy (containers-policy.json, as for images) is checked first: a tag is
    resolved to its digest once, that digest is judged and then pulled (a rejection exits 3
    and fetches nothing; with --offline nothing is fetched, so nothing is judged).

    Every blob is hashed while written, bounded by its descriptor, resumed after an interruption
    and shared with concurrent pulls; a model already in the store (by digest) sends nothing.
    Examples: lemonpack models pull 127.0.0.1:5000/models/tiny:v1 ;
    lemonpack models pull oci://registry.example/m@sha256:...
    """
    import sys

    from lemonpack.runtime.models.pull import pull_model
    from lemonpack.trust.check import Trust

    show = (sys.stderr.isatty() and not json_out) if progress is None else progress
    trust = None if offline else Trust.load(policy, registries_d, insecure=insecure, registry_config=registry_config)
    got = pull_model(reference, offline=offline, progress=show, insecure=insecure, registry_config=registry_config,
                     trust=trust)  # judged first, through the pull's own client
    _print_pulled(got, json_out)
    return 0


def _print_pulled(got, json_out: bool) -> None:
    """A pulled model: JSON, or the pinned reference, the directory and one line per file."""
    if json_out:
        print_json(got.to_json())
        return
    console.print(f"pulled {got.reference} ({got.artifact.format}, {got.fetched} bytes fetched)", markup=False)
    console.print(f"  directory: {got.directory}", markup=False)
    for f in got.artifact.layers:
        console.print(f"  {f.name}  {f.size} bytes  {f.digest}", markup=False)


@models_app.command("inspect")
def models_inspect(reference: str = typer.Argument(..., metavar="[oci://]HOST[:PORT]/REPO[:TAG|@DIGEST]",
                                                   help="The model artifact."),
                   offline: bool = typer.Option(False, "--offline", help="Never contact the registry: only the store."),
                   insecure: bool = INSECURE_OPTION, registry_config: Path = REGISTRY_CONFIG_OPTION,
                   json_out: bool = JSON_OPTION) -> int:
    """Describe a model artifact (format, architecture, size, files) from its manifest and config.

    No layer is fetched; the digest a tag names is printed.
    """
    from lemonpack.runtime.models.pull import inspect_model

    got = inspect_model(reference, offline=offline, insecure=insecure, registry_config=registry_config)
    if json_out:
        print_json(got.to_json())
        return 0
    a = got.artifact
    console.print(f"{got.reference}", markup=False)
    for label, value in (("format", a.format), ("model format", a.model_format), ("architecture", a.architecture),
                         ("parameters", a.parameters), ("quantization", a.quantization),
                         ("context length", a.context_length), ("name", a.name), ("version", a.version),
                         ("created", a.created), ("size", f"{a.size} bytes"),
                         ("stored", f"yes: {got.directory}" if got.stored else "no")):
        if value is not None:
            console.print(f"  {label}: {value}", markup=False)
    for f in a.layers:
        console.print(f"  file {f.name}  {f.role}  {f.size} bytes  {f.media_type}", markup=False)
    return 0


@models_app.command("push")
def models_push(files: list[Path] = typer.Argument(..., metavar="FILE...", help="Model files (GGUF and its "
                                                   "splits, an mmproj, docs), each named by its base name."),
                to: str = typer.Option(..., "--to", metavar="HOST[:PORT]/REPO[:TAG]",
                                       help="Destination repository and tag (default latest)."),
                sign: str = typer.Option(None, "--sign", metavar="PREFIX.key",
                                         help="After the push, sign the manifest with this cosign key."),
                fmt: str = typer.Option("modelpack", "--format", metavar="modelpack|docker",
                                        help="CNCF ModelPack (default) or Docker Model Runner's format."),
                name: str = typer.Option(None, "--name", help="The descriptor's name (default: the main file's stem)."),
                version: str = typer.Option(None, "--version", help="The descriptor's version."),
                modelcar: bool = typer.Option(False, "--modelcar", help="Also push a modelcar image (the files "
                                              "under /models, KServe's convention) as TAG-modelcar."),
                modelcar_base: str = typer.Option(None, "--modelcar-base", metavar="oci:DIR[:TAG]",
                                                  help="The modelcar's base image (a local layout with sh, cp, "
                                                       "ln, sleep: busybox); without one it is not runnable."),
                progress: bool = PROGRESS_OPTION, insecure: bool = INSECURE_OPTION,
                registry_config: Path = REGISTRY_CONFIG_OPTION, json_out: bool = JSON_OPTION) -> int:
    """Push model files as one model artifact (CNCF ModelPack, or Docker's with --format docker).

    One uncompressed layer per file, named by org.cncf.model.filepath and
    org.opencontainers.image.title; the config's architecture, parameters and quantization come
    from the GGUF header, its date from SOURCE_DATE_EPOCH (0 when unset): the same files give the
    same digest. Blobs the registry has are not sent again.
    Example: lemonpack models push tiny.gguf --to 127.0.0.1:5000/models/tiny:v1 --sign cosign.key
    """
    import sys
    from functools import partial

    from lemonpack.runtime.models.push import push_model

    signer = None
    if sign is not None:
        from lemonpack.cli.signing_cmds import load_private_key
        from lemonpack.signing.remote import sign_image

        private = load_private_key(sign)  # a wrong password fails before the push
        signer = partial(sign_image, private=private, insecure=insecure, registry_config=registry_config)
    show = (sys.stderr.isatty() and not json_out) if progress is None else progress
    pushed = push_model(files, to, fmt=fmt, sign=signer, name=name, version=version, insecure=insecure,
                        registry_config=registry_config, progress=show)
    car = None
    if modelcar or modelcar_base:
        from lemonpack.runtime.models.modelcar import modelcar_destination, push_modelcar

        car = push_modelcar(files, modelcar_destination(to), base=modelcar_base, insecure=insecure,
                            registry_config=registry_config, progress=show)
    if json_out:
        print_json({**pushed.to_json(), **({"modelcar": car.to_json()} if car else {})})
        return 0
    console.print(f"pushed {pushed.reference} ({pushed.format}, {len(pushed.files)} file(s), "
                  f"{pushed.uploaded} bytes sent)", markup=False)
    if car is not None:
        console.print(f"pushed modelcar {car.reference}" + ("" if car.base else " (no --modelcar-base: files only, "
                                                             "not runnable)"), markup=False)
    if pushed.signature is not None:
        console.print(f"signed {pushed.signature['reference']} -> {pushed.signature['signature_tag']}", markup=False)
    return 0
