"""Errors a user can act on. The CLI prints their message (no traceback unless ``--debug``) and exits non-zero."""


class SkyrlError(Exception):
    """Base class: the message names the culprit (config key, plugin, tool, argument) and what would be valid."""

    exit_code = 2


class ConfigError(SkyrlError):
    """A config file or override is invalid: unknown key, wrong type, bad value, missing env var."""


class PluginError(SkyrlError):
    """A plugin could not be loaded or registered something invalid (clashing name, bad hookimpl)."""


class RegistrationError(PluginError):
    """Something registered through a hook is invalid, or its name clashes with another plugin's."""


class UnknownComponentError(SkyrlError):
    """A config or command names a tool, task, engine, ... that no loaded plugin registered."""


class MissingExtraError(SkyrlError):
    """An optional dependency is not installed; the message says which extra to install."""


class ToolSchemaError(RegistrationError):
    """A tool's ``parameters`` is not a valid JSON Schema."""


class RuntimeLost(SkyrlError):
    """A trajectory's runtime is gone mid-rollout (its container was killed or removed, its Ray actor or node
    died): raised by ``Runtime.exec`` and the remote placement. It ends only that trajectory, with finish reason
    ``error_runtime`` (``finish_reason`` below); the runtime is replaced for the next one."""

    finish_reason = "error_runtime"


class ToolArgumentsError(SkyrlError):
    """Tool-call arguments fail the tool's JSON Schema. ``message`` says which argument and what is valid."""


def require(module: str, extra: str, what: str):
    """Import ``module`` or raise MissingExtraError telling the user to install ``skyrl-core[extra]``."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingExtraError(
            f"{what} needs the python package '{module.split('.')[0]}': install skyrl-core[{extra}] "
            f"(pip install 'skyrl-core[{extra}]'); import failed with: {exc}"
        ) from exc
