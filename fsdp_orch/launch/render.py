"""Rendering: LaunchPlan -> the text of every artifact submit writes or runs.
Pure apart from reading templates."""

from __future__ import annotations

import json
import posixpath
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import jinja2

from fsdp_orch.launch.plan import PATH_ENV, LaunchPlan, slug, spec_json
from fsdp_orch.nodeagent.beat_dir import NODE_TMP
from fsdp_orch.places.builtin import builtin_dir, home
from fsdp_orch.places.trust import load_problem, refusal
from fsdp_orch.vocab.errors import InputError
from fsdp_orch.vocab.version import __version__


@dataclass(frozen=True)
class Artifact:
    path: str  # where submit writes it (on the nodes' filesystem)
    text: str
    executable: bool = False

    @property
    def name(self) -> str:
        return posixpath.basename(self.path)


def shell_quote(value: object) -> str:
    return shlex.quote(str(value))


def path_quote(value: object) -> str:
    """Quote a path for the shell, keeping a leading ``~/`` expandable (remote home directories)."""
    text = str(value)
    if text == "~":
        return '"$HOME"'
    if text.startswith("~/"):
        return '"$HOME"/' + shlex.quote(text[2:])
    return shlex.quote(text)


def one_line(value: object) -> str:
    """For comments: a user value must never end a comment line and start a command."""
    text = str(value)
    return json.dumps(text)[1:-1] if any(c in text for c in "\n\r\x0b\x0c\x00") else text


def sbatch_value(value: object) -> str:
    """Quote a value for an ``#SBATCH`` line the way sbatch reads it back (not the shell's way).

    sbatch splits the line on whitespace, ``"`` groups, ``\\`` escapes the next character and an
    unescaped ``#`` starts a comment (``_get_argument`` in slurm's src/sbatch/opt.c).
    """
    text = str(value)
    if any(c in text for c in "\n\r\x00"):
        raise InputError(f"an #SBATCH value cannot contain a line break: {text!r}")
    escaped = re.sub(r'([\\"#])', r"\\\1", text)
    return f'"{escaped}"' if any(c.isspace() for c in text) else escaped


def sbatch_path(value: object) -> str:
    """A path for ``--output``: like :func:`sbatch_value`,
    with ``%`` kept from meaning a pattern."""
    return sbatch_value(str(value).replace("%", "%%"))


def package_root(bootstrap_dir: object) -> str:
    """The folder to import fsdp_orch from, given the bootstrap's
    (``<root>/fsdp_orch/bootstrap/site``)."""
    return posixpath.dirname(posixpath.dirname(posixpath.dirname(str(bootstrap_dir))))


def template_dirs(cwd: Path | None = None) -> list[Path]:
    """Project ``./templates``, then ``$FSDP_ORCH_HOME/templates``, then the built-in ones."""
    dirs = [(cwd or Path.cwd()) / "templates", home() / "templates", builtin_dir("templates")]
    seen: list[Path] = []
    for d in dirs:
        if d.is_dir() and d.resolve() not in [s.resolve() for s in seen]:
            seen.append(d)
    return seen


class _CheckedLoader(jinja2.FileSystemLoader):
    """Templates from ``search``; each one loaded from outside the built-in folder follows the rule
    of ``places.trust`` (a template decides what runs as the user), or is refused."""

    def get_source(self, environment: jinja2.Environment,
                   template: str) -> tuple[str, str, Callable[[], bool]]:
        source, filename, uptodate = super().get_source(environment, template)
        builtin = str(builtin_dir("templates").resolve())
        if not str(Path(filename).resolve()).startswith(builtin + "/"):
            why = load_problem(filename)
            if why is not None:
                raise InputError(refusal("template", filename, why,
                                         "move it into a folder of yours and `chmod go-w` it and "
                                         "its folders, or remove it to use the built-in one"))
        return source, filename, uptodate


def own_template_dirs(cwd: Path | None = None) -> tuple[str, ...]:
    """The template folders of ``template_dirs`` that are not the built-in one, as absolute paths:
    what a submission records, so that every attempt renders with the templates ``render`` shows."""
    builtin = builtin_dir("templates").resolve()
    return tuple(str(d.resolve()) for d in template_dirs(cwd) if d.resolve() != builtin)


def make_environment(search: list[Path]) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=_CheckedLoader([str(d) for d in search]),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["q"] = shell_quote
    env.filters["qpath"] = path_quote
    env.filters["oneline"] = one_line
    env.filters["slug"] = slug
    env.filters["sbatch_value"] = sbatch_value
    env.filters["sbatch_path"] = sbatch_path
    env.globals["version"] = __version__
    env.globals["path_env"] = PATH_ENV
    env.globals["node_tmp"] = NODE_TMP
    env.filters["package_root"] = package_root
    return env


class Templates(Protocol):
    """Renders one template with the plan (and ``extra``); ``main`` names the kind's main template,
    or the profile's ``template:`` that replaces it."""

    @property
    def main(self) -> str: ...

    def __call__(self, name: str, **extra: object) -> str: ...


class KindArtifacts(Protocol):
    """What a cluster kind adds to the artifacts every plan has
    (job.json, the accelerate config)."""

    main_template: str  # the built-in template each node runs

    def artifacts(self, plan: LaunchPlan, templates: Templates) -> list[Artifact]: ...


@dataclass(frozen=True)
class _TemplateSet:
    main: str
    render: Callable[..., str]

    def __call__(self, name: str, **extra: object) -> str:
        return self.render(name, **extra)


def render_plan(plan: LaunchPlan, kind: KindArtifacts, *, profile_template: Path | None = None,
                search: list[Path] | None = None) -> list[Artifact]:
    """Every artifact for ``plan``, in the order submit writes them; templates from ``search``
    and then the built-in ones (None: ``template_dirs`` of the current folder)."""
    builtin = builtin_dir("templates")
    dirs = template_dirs() if search is None else [*search, builtin]
    main_name = kind.main_template
    if profile_template is not None:
        if not profile_template.is_file():
            raise InputError("template file not found", file=str(profile_template),
                             field="template")
        dirs.insert(0, profile_template.parent)
        main_name = profile_template.name
    env = make_environment(dirs)

    def render(name: str, **extra: object) -> str:
        try:
            return env.get_template(name).render(plan=plan, **extra)
        except jinja2.UndefinedError as exc:
            raise InputError(f"template uses an undefined value: {exc.message}",
                             file=name) from None
        except jinja2.TemplateSyntaxError as exc:
            raise InputError(f"template syntax error: {exc.message}", file=exc.filename or name,
                             line=exc.lineno) from None

    out = [Artifact(plan.spec_path, spec_json(plan))]
    if plan.launcher == "accelerate":
        reshard = plan.job.fsdp.reshard_after_forward
        if reshard is None:
            reshard = plan.job.fsdp.sharding_strategy not in ("SHARD_GRAD_OP", "HYBRID_SHARD_ZERO2")
        assert plan.accelerate_config_path
        out.append(Artifact(plan.accelerate_config_path,
                            render("accelerate_config.yaml.j2", fsdp=plan.job.fsdp,
                                   reshard_after_forward=reshard)))
    return out + kind.artifacts(plan, _TemplateSet(main_name, render))


def write_artifacts(artifacts: list[Artifact], out_dir: Path | None = None) -> list[Path]:
    """Write each artifact (to its own path, or by name into ``out_dir``); files
    appear whole or not at all, private to this user (folders 0700, scripts 0700, the
    rest 0600: they hold env values)."""
    from fsdp_orch.places.private import make_private_dirs, write_atomically

    written = []
    for art in artifacts:
        target = (out_dir / art.name) if out_dir else Path(art.path)
        make_private_dirs(str(target.parent))
        write_atomically(target, art.text, mode=0o700 if art.executable else 0o600)
        written.append(target)
    return written
