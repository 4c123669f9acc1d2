"""The core's layout stays what the CHANGELOG says: built-ins hold their implementation under
``skyrl_core/default_plugins/``, no core module is over 600 lines or imports GSM8K code, and a module that moved
left nothing at its old path (no package was ever published there)."""

from __future__ import annotations

import ast
import importlib
import importlib.machinery
import re
import sys
from pathlib import Path

import pytest

CORE = Path(__file__).resolve().parents[1] / "skyrl_core"
MAX_LINES = 600


def core_modules() -> list[Path]:
    return sorted(p for p in CORE.rglob("*.py") if "templates" not in p.parts)


def test_no_core_module_is_over_600_lines():
    long = {str(p.relative_to(CORE)): n for p in core_modules() if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def imported_modules(path: Path) -> set[str]:
    """Absolute names of the modules ``path`` imports (relative imports resolved against its package)."""
    package = ".".join(path.relative_to(CORE.parent).with_suffix("").parts[:-1])
    if path.name == "__init__.py":
        package = ".".join(path.relative_to(CORE.parent).parts[:-1])
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            names.add(base)
            names.update(f"{base}.{a.name}" for a in node.names)
    return names


def test_no_core_module_outside_default_plugins_imports_gsm8k_code():
    offenders = {str(p.relative_to(CORE)): sorted(n for n in imported_modules(p) if "gsm8k" in n)
                 for p in core_modules() if "default_plugins" not in p.parts}
    offenders = {k: v for k, v in offenders.items() if v}
    assert not offenders, offenders
    # the check itself sees such an import: the built-in plugin does import its GSM8K modules
    assert "skyrl_core.default_plugins.gsm8k.dataset" in imported_modules(CORE / "default_plugins/gsm8k/__init__.py")


def test_every_builtin_holds_its_implementation_in_its_own_package():
    for name in ("gsm8k", "parsers", "dispatchers", "engines", "runtimes", "trainer", "viewer", "curation", "bench"):
        package = CORE / "default_plugins" / name
        assert (package / "__init__.py").is_file() and len(list(package.glob("*.py"))) > 1, name
    assert (CORE / "default_plugins/gsm8k/data/test.jsonl").stat().st_size > 400_000
    assert (CORE / "default_plugins/gsm8k/data/LICENSE").read_text().startswith("MIT")


# Module paths of the core before its built-ins moved into default_plugins/, and skyrl_core.bench before it became
# the built-in plugin default_plugins/bench. Nothing was ever published at them, so they simply go: no shim serves them.
OLD_PATHS = ("skyrl_core.gsm8k", "skyrl_core.parsers", "skyrl_core.parsers_xml", "skyrl_core.parsers_deepseek",
             "skyrl_core.inference.hf", "skyrl_core.inference.openai", "skyrl_core.inference.vllm",
             "skyrl_core.inference.serve", "skyrl_core.trainer.local", "skyrl_core.bench", "skyrl_core.bench.clock",
             "skyrl_core._moved")


@pytest.mark.parametrize("old", OLD_PATHS)
def test_old_module_paths_are_gone(old):
    """No module or package at the old path in this checkout. (Looked up with the path finder on the checkout's
    directories rather than imported: a shared venv's editable install of another checkout would serve it.)"""
    parent = CORE.parent.joinpath(*old.split(".")[:-1])
    assert importlib.machinery.PathFinder.find_spec(old, [str(parent)]) is None, old


def test_importing_skyrl_core_adds_no_import_hook_and_moved_names_are_not_served():
    import skyrl_core
    import skyrl_core.dispatchers as dispatchers
    import skyrl_core.runtime as runtime

    assert not any(type(f).__module__.startswith("skyrl_core") for f in sys.meta_path), sys.meta_path
    assert skyrl_core.__version__ == "0.1.0"
    for module, name in ((runtime, "LocalSandbox"), (dispatchers, "BUILTIN_DISPATCHERS")):
        with pytest.raises(AttributeError):
            getattr(module, name)


# Benchmarks and tasks that belong to plugins (their names, their output files and harnesses).
BENCHMARK_WORDS = re.compile(r"\b(swe|swe-bench|swebench|predictions|harness|hotpot\w*|miniwob\w*|memagent|osworld|"
                             r"gsm8k\w*|webshop|alfworld)\b", re.IGNORECASE)


def eval_path_sources() -> dict[str, str]:
    """``{module name: source}`` of ``skyrl eval``'s code: the eval loop, the module of the registered ``eval``
    command (found through the registry, wherever it lives) and the CLI."""
    import inspect

    import skyrl_core.cli
    import skyrl_core.default_plugins.eval.run
    from skyrl_core.plugins import get_registry

    command = get_registry().get("commands", "eval")
    callback = command.registered_commands[0].callback if hasattr(command, "registered_commands") else command.callback
    modules = [skyrl_core.default_plugins.eval.run, inspect.getmodule(callback), skyrl_core.cli]
    return {m.__name__: inspect.getsource(m) for m in modules}


def test_the_eval_path_knows_no_benchmark():
    """``skyrl eval``'s code names no benchmark: a benchmark's output formats come from its plugin's eval writer
    (``register_eval_writers``)."""
    sources = eval_path_sources()
    assert len(sources) == 3 and "skyrl_core.default_plugins.eval.run" in sources
    found = {name: sorted({m.group(0) for m in BENCHMARK_WORDS.finditer(text)}) for name, text in sources.items()}
    found = {name: words for name, words in found.items() if words}
    assert not found, f"{found}: move these to the benchmark's plugin, behind a hook"
