"""The core's layout stays what CHANGELOG 0.2 promises: built-ins hold their implementation under
``skyrl_core/default_plugins/``, no core module is over 600 lines or imports GSM8K code, and every old import path
still works for one release with a DeprecationWarning naming the new one."""

from __future__ import annotations

import ast
import importlib
import sys
import warnings
from pathlib import Path

import pytest

from skyrl_core._moved import MOVED_MODULES

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
    for name in ("gsm8k", "parsers", "dispatchers", "engines", "runtimes", "trainer", "viewer", "curation"):
        package = CORE / "default_plugins" / name
        assert (package / "__init__.py").is_file() and len(list(package.glob("*.py"))) > 1, name
    assert (CORE / "default_plugins/gsm8k/data/test.jsonl").stat().st_size > 400_000
    assert (CORE / "default_plugins/gsm8k/data/LICENSE").read_text().startswith("MIT")


@pytest.mark.parametrize("old", sorted(MOVED_MODULES))
def test_old_module_paths_import_with_a_warning_naming_the_new_path(old):
    sys.modules.pop(old, None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = importlib.import_module(old)
        # a name every old module had, looked up through the old path
        probe = {"skyrl_core.gsm8k": "gsm8k_answer", "skyrl_core.parsers": "HermesParser",
                 "skyrl_core.parsers_xml": "XmlParameterParser", "skyrl_core.parsers_deepseek": "DeepSeekV31Parser",
                 "skyrl_core.inference.hf": "HFEngine", "skyrl_core.inference.openai": "OpenAIEngine",
                 "skyrl_core.inference.vllm": "VLLMEngine", "skyrl_core.inference.serve": "run_server",
                 "skyrl_core.trainer.local": "LocalBackend"}[old]
        obj = getattr(module, probe)
    messages = [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)]
    assert any(m.startswith(old) and "moved to skyrl_core.default_plugins." in m for m in messages), messages
    new_home = importlib.import_module(obj.__module__)
    assert obj.__module__.startswith("skyrl_core.default_plugins.") and getattr(new_home, probe) is obj


def test_moved_names_of_modules_that_stayed_warn_and_are_the_same_objects():
    from skyrl_core.default_plugins.dispatchers import BUILTIN_DISPATCHERS
    from skyrl_core.default_plugins.runtimes.sandbox import LocalSandbox

    import skyrl_core.dispatchers as dispatchers
    import skyrl_core.runtime as runtime

    with pytest.warns(DeprecationWarning, match=r"skyrl_core\.runtime\.LocalSandbox moved to "
                                                r"skyrl_core\.default_plugins\.runtimes\.sandbox\.LocalSandbox"):
        assert runtime.LocalSandbox is LocalSandbox
    with pytest.warns(DeprecationWarning, match=r"skyrl_core\.dispatchers\.BUILTIN_DISPATCHERS moved"):
        assert dispatchers.BUILTIN_DISPATCHERS is BUILTIN_DISPATCHERS
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        runtime.Nope  # noqa: B018


def test_a_name_no_old_module_had_is_an_import_error():
    with pytest.raises(ImportError):
        from skyrl_core.parsers import not_a_parser  # noqa: F401
