"""Built-in command ``skyrl new plugin NAME``: generate a plugin distribution from the cookiecutter template
(cookiecutter is imported only when the command runs, so ``skyrl --help`` stays fast).

The template's only copy is ``cookiecutter/skyrl-plugin/`` at the repository root. A wheel carries it as
``skyrl_core/_template/skyrl-plugin`` (copied there by ``setup.py``'s build hook); a checkout or an editable
install uses the repository's copy (:func:`find_template`).

The template's layout is the one every plugin in this repository follows (``docs/plugins.md``): ``pyproject.toml``
with the ``skyrl`` entry point, the package with hookimpls in ``__init__.py`` and one module per concept, bundled
data with disjoint train and test splits, an example config, tests and a CI workflow.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Optional

import typer

from ..errors import SkyrlError
from ..hookspecs import hookimpl



def find_template() -> Path:
    """The template directory: the copy inside the installed package (a wheel), else the checkout's
    ``cookiecutter/skyrl-plugin``. Raises SkyrlError naming both places when neither holds a ``cookiecutter.json``."""
    here = Path(__file__).resolve()
    places = (here.parents[1] / "_template" / "skyrl-plugin", here.parents[2] / "cookiecutter" / "skyrl-plugin")
    for place in places:
        if (place / "cookiecutter.json").is_file():
            return place
    raise SkyrlError(f"the plugin template is missing: looked in {places[0]} (a wheel's copy) and {places[1]} "
                     f"(a checkout's); reinstall skyrl-core")
NAME_PATTERN = r"[a-z][a-z0-9]*(-[a-z0-9]+)*"
# distributions of skyrl itself or already taken on the package index: a new plugin must not shadow them
TAKEN = ("skyrl-core", "skyrl-train", "skyrl-gym", "skyrl-tx", "skyrl-agent", "skyrl-swe", "skyrl-verl",
         "skyrl-tinker", "skyrl-memagent", "skyrl-osworld", "skyrl-deep-research", "skyrl-skyrl-train")


def plugin_names(name: str) -> dict[str, str]:
    """The names derived from a plugin name: ``{"dist_name", "module_name", "entry_point"}``
    (``letter-count`` -> ``skyrl-letter-count``, ``skyrl_letter_count``, ``letter_count``).

    Raises SkyrlError when ``name`` is not lower-case letters, digits and single hyphens starting with a letter,
    or when the distribution it gives is taken."""
    if name.startswith("skyrl-") or name.startswith("skyrl_"):
        raise SkyrlError(f"plugin name {name!r}: leave out the 'skyrl-' prefix, it is added "
                         f"(skyrl new plugin {name[6:] or 'my-task'} makes skyrl-{name[6:] or 'my-task'})")
    if not re.fullmatch(NAME_PATTERN, name):
        raise SkyrlError(f"plugin name {name!r} is not valid: use lower-case letters, digits and single hyphens, "
                         f"starting with a letter (e.g. 'letter-count')")
    dist = f"skyrl-{name}"
    if dist in TAKEN:
        raise SkyrlError(f"plugin name {name!r} gives the distribution {dist!r}, which is taken; pick another name")
    under = name.replace("-", "_")
    return {"dist_name": dist, "module_name": f"skyrl_{under}", "entry_point": under}


def skyrl_checkout(checkout: Path | None = None) -> dict[str, str]:
    """Which skyrl repository and commit a generated plugin's CI checks out (skyrl is on no package index; the
    workflow installs it from that checkout): ``{"skyrl_repository": "OWNER/NAME", "skyrl_ref": REF}``.

    Taken from the checkout this skyrl-core runs from (``checkout``, default: the one holding this file; its
    ``origin`` remote on GitHub and its ``HEAD`` commit),
    else from the git URL pip recorded when it was installed (``direct_url.json``), else the template's
    placeholders (``OWNER/skyrl`` at ``main``) for the user to edit."""
    import importlib.metadata
    import json as _json
    import subprocess

    found = {"skyrl_repository": "OWNER/skyrl", "skyrl_ref": "main"}
    github = re.compile(r"github\.com[:/](?P<repo>[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+?)(?:\.git)?/?$")
    checkout = checkout or Path(__file__).resolve().parents[2]
    if (checkout / ".git").exists():
        def git(*args: str) -> str:
            proc = subprocess.run(["git", "-C", str(checkout), *args], capture_output=True, text=True)
            return proc.stdout.strip() if proc.returncode == 0 else ""

        url, commit = git("remote", "get-url", "origin"), git("rev-parse", "HEAD")
    else:
        try:
            direct = importlib.metadata.distribution("skyrl-core").read_text("direct_url.json")
        except importlib.metadata.PackageNotFoundError:
            direct = None
        info = _json.loads(direct) if direct else {}
        url, commit = info.get("url", ""), info.get("vcs_info", {}).get("commit_id", "")
    match = github.search(url)
    if match:
        found["skyrl_repository"] = match["repo"]
    if commit:
        found["skyrl_ref"] = commit
    return found


def _check_field(field: str, value: str) -> str:
    """A description or author goes into pyproject.toml's double-quoted strings and README.md: one line, no
    ``"`` or backslash. Raises SkyrlError naming the field."""
    if any(c in value for c in '"\\\n\r'):
        raise SkyrlError(f"--{field} {value!r} is not valid: one line without double quotes or backslashes")
    return value


def generate_plugin(name: str, output_dir: str | Path = ".", description: str | None = None,
                    author: str | None = None, no_input: bool = True) -> Path:
    """Generate the plugin ``skyrl-<name>`` under ``output_dir`` and return its directory.

    The distribution, module and entry-point names are derived from ``name`` (:func:`plugin_names`), never
    asked. With ``no_input=False`` the description and author, when not given, are asked for on the terminal
    (the template's defaults offered); nothing else is.

    Raises SkyrlError for an invalid name (see :func:`plugin_names`), description or author, an existing target
    directory, a refusal by the template's hook (its reason, one line), or a missing cookiecutter."""
    names = plugin_names(name)
    target = Path(output_dir) / names["dist_name"]
    if target.exists():
        raise SkyrlError(f"{target} exists already; choose another --output-dir or remove it")
    try:
        from cookiecutter.exceptions import CookiecutterException
        from cookiecutter.main import cookiecutter
    except ImportError:  # pragma: no cover - cookiecutter is a core dependency
        raise SkyrlError("skyrl new plugin needs cookiecutter: pip install cookiecutter") from None
    import json as _json

    template = find_template()
    defaults = _json.loads((template / "cookiecutter.json").read_text())
    if not no_input:
        import click

        if description is None:
            description = click.prompt("description", default=defaults["description"])
        if author is None:
            author = click.prompt("author", default=defaults["author"] or "", show_default=False)
    extra = {"plugin_name": name, **names, **skyrl_checkout(),
             "description": _check_field("description", defaults["description"] if description is None
                                         else description),
             "author": _check_field("author", defaults["author"] if author is None else author)}
    Path(output_dir).mkdir(parents=True, exist_ok=True)
    try:  # every field is set: cookiecutter asks nothing
        out = Path(cookiecutter(str(template), no_input=True, output_dir=str(output_dir), extra_context=extra))
    except CookiecutterException as exc:  # the hook's refusal (it wrote nothing): one line, as for a bad name
        reason = " ".join(str(exc).split()) or type(exc).__name__
        raise SkyrlError(f"skyrl new plugin {name}: the template refused: {reason}") from None
    import shutil

    for cache in sorted(out.rglob("__pycache__"), reverse=True):  # a wheel's template was byte-compiled by pip
        shutil.rmtree(cache)
    return out


new_app = typer.Typer(rich_markup_mode=None, add_completion=False, no_args_is_help=True,
                      help="Create new skyrl components from templates.")


@new_app.callback()
def _new() -> None:
    """Create new skyrl components from templates."""


@new_app.command("plugin")
def new_plugin_command(
    name: str = typer.Argument(..., help="Plugin name, lower-case with hyphens (letter-count -> skyrl-letter-count)."),
    output_dir: str = typer.Option(".", "--output-dir", "-o", help="Directory to create the plugin in."),
    no_input: bool = typer.Option(False, "--no-input", help="Do not ask for the description and author; use the "
                                  "defaults for those not given."),
    description: Optional[str] = typer.Option(None, "--description", help="One-line description of the plugin."),
    author: Optional[str] = typer.Option(None, "--author", help="Author name for pyproject.toml."),
) -> None:
    """Generate a plugin distribution: a tool, an instruction builder, an async verifier and a task with fixed
    train/test data, the sandbox runtime, an example config, tests and a CI workflow."""
    out = generate_plugin(name, output_dir, description=description, author=author, no_input=no_input)
    names = plugin_names(name)
    typer.echo(f"created {out}\n\nnext:\n  pip install -e '{out}[test]'\n  skyrl plugins"
               f"                 # lists {names['entry_point']}\n  (cd {out} && pytest -q)\n"
               f"  skyrl eval {name}:{name} eval_data.limit=2 sampling.n_samples=1")


@hookimpl(trylast=True)
def register_commands(register):
    register(new_app, name="new")
