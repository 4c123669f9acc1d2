"""The catalog's commands: ``skyrl plugins`` (every installed plugin: distribution, version, hooks, what it
registered, its example configs, its problems), ``skyrl tools`` (every tool with its parameters), ``skyrl tools run
NAME ARGS`` (one tool once, outside the agent loop, in a runtime) and ``skyrl tasks`` (every task with its tools,
runtime, verifier and shipped example configs), printed through :mod:`.tables`."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer

from skyrl_core.errors import SkyrlError

from . import tables

tools_app = typer.Typer(help="List registered tools, or run one (`skyrl tools run`).", no_args_is_help=False,
                        invoke_without_command=True, rich_markup_mode=None)


def _params_summary(schema: dict) -> str:
    props = schema.get("properties", {})
    required = set(schema.get("required", []))
    parts = []
    for name, spec in props.items():
        kind = spec.get("type", "any")
        parts.append(f"{name}{'' if name in required else '?'}: {kind if isinstance(kind, str) else '|'.join(kind)}")
    return ", ".join(parts) or "(none)"


@tools_app.callback()
def tools_list(ctx: typer.Context,
               as_json: bool = typer.Option(False, "--json", help="Print full schemas as JSON.")) -> None:
    """List every registered tool with its description and parameters."""
    from skyrl_core.plugins import get_plugins

    if ctx.invoked_subcommand is not None:
        return
    regs = get_plugins().registry.items("tools")
    if as_json:
        tables.console.print_json(json.dumps([{**r.obj.schema()["function"], "plugin": r.plugin} for r in regs]))
        return
    tables.show_table("skyrl tools", ["tool", "plugin", "parameters", "description"],
                      [[r.name, r.plugin, _params_summary(r.obj.parameters), r.obj.description] for r in regs],
                      whole=("tool",))


@tools_app.command("run")
def tools_run(
    name: str = typer.Argument(..., help="Registered tool name."),
    args: str = typer.Argument("{}", help="Arguments as a JSON object; @FILE reads them from a file, - from stdin."),
    workspace: Optional[str] = typer.Option(None, "--workspace", help="Directory the tool acts in (used in place)."),
    runtime: str = typer.Option("sandbox", "--runtime", help="Runtime kind (see `skyrl plugins --all`)."),
    as_json: bool = typer.Option(False, "--json", help="Print the ToolResult as JSON."),
) -> None:
    """Run one tool once, outside the agent loop, and print its result."""
    import asyncio

    from skyrl_core.plugins import get_plugins
    from skyrl_core.runtime import RuntimeSpec
    from skyrl_core.tools import ToolContext, example_arguments

    registry = get_plugins().registry
    tool = registry.get("tools", name)
    if args == "-":
        args = sys.stdin.read()
    elif args.startswith("@"):
        try:
            args = Path(args[1:]).read_text(encoding="utf-8")
        except OSError as exc:
            raise SkyrlError(f"tool arguments file {args[1:]!r} cannot be read ({exc.strerror})") from None
    try:
        parsed = json.loads(args)
    except json.JSONDecodeError as exc:
        example = json.dumps(example_arguments(tool.parameters), ensure_ascii=False)
        raise SkyrlError(f"tool arguments must be a JSON object: {exc}; e.g. {example}") from None
    if workspace is not None and not Path(workspace).is_dir():
        raise SkyrlError(f"--workspace {workspace} is not a directory (give the directory the tool acts in)")
    runtime_cls = registry.get("runtimes", runtime)
    spec = RuntimeSpec(type=runtime, workspace=workspace)

    async def go():
        rt = runtime_cls(spec)
        await rt.start()
        try:
            return await tool.call(parsed, ToolContext(runtime=rt))
        finally:
            await rt.close()

    result = asyncio.run(go())
    if as_json:
        tables.console.print_json(json.dumps({"output": result.output, "error": result.error,
                                              "finish": result.finish, "answer": result.answer,
                                              "metadata": result.metadata}, default=str))
        return
    # what the tool produced, byte for byte: no markup, emoji codes or highlighting (`:x:` stays `:x:`)
    sys.stdout.write(result.output if result.output.endswith("\n") or not result.output else result.output + "\n")
    sys.stdout.flush()
    if result.finish:
        tables.console.print(f"[bold]finish[/bold] answer={result.answer!r}")
    if result.error:
        raise typer.Exit(1)


def tasks_command(as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """List registered tasks with their tools, runtime, verifier and instruction builder."""
    from ..example_configs.shipped import find_examples
    from skyrl_core.plugins import get_plugins

    regs = get_plugins().registry.items("tasks")
    examples = find_examples()
    rows = [{"name": r.name, "plugin": r.plugin, "description": r.obj.description, "tools": list(r.obj.tools),
             "runtime": r.obj.runtime, "verifier": r.obj.verifier,
             "instruction_builder": r.obj.instruction_builder,
             "examples": [ex.ref for ex in examples if r.name in ex.tasks]} for r in regs]
    if as_json:
        tables.console.print_json(json.dumps(rows))
        return
    tables.show_table("skyrl tasks", ["task", "plugin", "tools", "runtime", "verifier", "examples", "description"],
                      [[row["name"], row["plugin"], ", ".join(row["tools"]), row["runtime"], row["verifier"],
                        ", ".join(row["examples"]) or "-", row["description"]] for row in rows], whole=("task",))


def plugins_command(
    all_: bool = typer.Option(False, "--all", help="Include the built-in default plugins."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON for machines."),
    hook: Optional[list[str]] = typer.Option(None, "--hook", metavar="HOOK[,HOOK...]",
                                             help="Only plugins implementing one of these hooks (repeat the "
                                                  "option or give a comma list), e.g. register_tools."),
) -> None:
    """List installed plugins: distribution, version, hooks and what each registered."""
    from skyrl_core import hookspecs
    from skyrl_core.plugins import KINDS, get_plugins

    plugins = get_plugins()
    plugins.registry  # build the registry so capabilities are filled in
    installed = [i for i in plugins.infos.values() if all_ or not i.builtin]
    infos = installed
    if hook:
        wanted = {h.strip() for part in hook for h in part.split(",") if h.strip()}
        known = {name for name, obj in vars(hookspecs).items() if hasattr(obj, "skyrl_spec")}
        unknown = sorted(wanted - known)
        if unknown:
            raise SkyrlError(f"--hook {', '.join(unknown)}: no such hook; valid: {', '.join(sorted(known))}")
        infos = [i for i in installed if wanted & set(i.hooks)]
    from ..example_configs.shipped import find_examples

    shipped: dict[str, list[str]] = {}  # entry-point name -> its example configs (`skyrl eval NAME`)
    for ex in find_examples():
        shipped.setdefault(ex.entry_point, []).append(ex.ref)
    if as_json:
        tables.console.print_json(json.dumps([{**i.to_json(), **({"examples": shipped[i.name]}
                                                                  if i.name in shipped else {})} for i in infos]))
        return
    if not infos:
        if installed:  # a filter excluded every plugin: say so, not that none is installed
            tables.console.print(f"None of the {len(installed)} {'' if all_ else 'third-party '}plugins installed "
                                 f"implements {' or '.join(sorted(wanted))} (`skyrl plugins` lists them all).",
                                 highlight=False)
        else:
            tables.console.print("No third-party plugins installed. `skyrl plugins --all` shows the built-ins; "
                                 "install one with `pip install -e plugins/<name>`.")
        return
    rows = []
    for info in infos:
        caps = "\n".join(f"{tables.plural(KINDS[k][1])}: {', '.join(v)}" for k, v in info.capabilities.items() if v)
        if info.name in shipped:
            caps += f"\nexample configs: {', '.join(shipped[info.name])}"
        status = f"error: {'; '.join(info.problems)}" if info.problems else "ok"
        rows.append([info.name, info.distribution or "-", info.version or "-", caps or "-", status])
    tables.show_table("skyrl plugins" + (" (with built-ins)" if all_ else ""),
                      ["plugin", "distribution", "version", "registers", "status"], rows, whole=("plugin",),
                      styles={"status": lambda v: "red" if v.startswith("error") else ""})
