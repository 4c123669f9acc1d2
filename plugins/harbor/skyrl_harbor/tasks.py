"""The ``harbor`` task: Harbor task directories (one, or a folder of them) as instances.

``data: {path: DIR}`` names a task directory or a folder holding task directories (each with a ``task.toml``);
without ``path``, the two sample tasks shipped in the package (``sample_tasks/``).
Every task is parsed when the data is loaded, so a bad one fails the run at once with its file named; a task whose
environment needs a built image (see :mod:`skyrl_harbor.environment`) fails it too, unless
``data.options.skip_unrunnable`` is true (then it is left out and logged). An instance's ``id`` is the task's
name, its ``data`` the directory's path: the runtime and the verifier read the rest from the directory.
"""

from __future__ import annotations

import logging
from importlib import resources

import attrs

from skyrl_core import DataSpec, Instance, Task

from .environment import HarborEnvironmentError, sandbox_plan
from .taskdir import HarborTaskError, find_task_dirs, load_task

log = logging.getLogger(__name__)

SYSTEM_PROMPT = ("You are working in a Linux terminal. Use the terminal tool to run bash commands that complete "
                 "the task; call finish when it is done.")


def sample_tasks() -> str:
    """The two small Harbor tasks shipped in the package (``sample_tasks/``): the data when ``path`` is not
    given."""
    return str(resources.files(__package__).joinpath("sample_tasks"))


def _load(spec: DataSpec, check, refused: type) -> list[Instance]:
    """The instances under ``spec.path`` (sorted by directory; the sample tasks without one) whose task passes
    ``check(task)``; a task it refuses with ``refused`` fails the load unless ``options.skip_unrunnable`` (then it
    is left out and logged). Raises HarborTaskError when ``path`` holds no task, a task is bad, or two share a
    name."""
    skip = bool(spec.options.get("skip_unrunnable", False))
    instances, seen = [], set()
    root = spec.path or sample_tasks()
    for directory in find_task_dirs(root):
        task = load_task(directory)
        try:
            check(task)
        except refused as exc:
            if not skip:
                raise
            log.warning("skipping %s (%s): %s", task.name, getattr(exc, "reason", "not runnable"), exc)
            continue
        if task.name in seen:
            raise HarborTaskError(f"{directory / 'task.toml'}: task name '{task.name}' is used by another task "
                                  f"under {root}")
        seen.add(task.name)
        instances.append(Instance(id=task.name, data={"path": str(task.path)}))
    return instances


def load(spec: DataSpec) -> list[Instance]:
    """The instances under ``spec.path`` (see :func:`_load`); HarborEnvironmentError for a task the sandbox
    cannot run unless ``options.skip_unrunnable``."""
    return _load(spec, sandbox_plan, HarborEnvironmentError)


def load_docker(spec: DataSpec) -> list[Instance]:
    """The instances under ``spec.path`` for the docker path (see :func:`_load`): every task whose Dockerfile's
    bases map to a local one (:func:`skyrl_harbor.images.rewrite_dockerfile`, the substitution logged); images
    are built when a runtime first needs them. ImageBuildError (``base-unmapped``, ``no-dockerfile``) unless
    ``options.skip_unrunnable``; RuntimeError naming the fix when skyrl-swe is not installed."""
    from .images import ImageBuildError, rewrite_dockerfile, swe_images

    swe_images()

    def check(task):
        log.info("task %s: %s", task.name, "; ".join(rewrite_dockerfile(task)[1]))

    return _load(spec, check, ImageBuildError)


def build_instructions(instance: Instance, task: Task) -> list[dict]:
    """The opening messages: a short system prompt and the task's ``instruction.md`` as the user's message."""
    harbor = load_task(instance.data["path"])
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": harbor.instruction}]


harbor_task = Task(
    name="harbor",
    description="Harbor / Terminal-Bench task directories (data.path: a task directory or a folder of them); "
                "a terminal in a sandbox laid out as the task's image, scored by the task's tests/test.sh.",
    load=load,
    instruction_builder="harbor",
    tools=("terminal", "finish"),
    verifier="harbor_tests",
    runtime="harbor_sandbox",
)

# the same task in the task's own Docker image: only the loader, the runtime and the words differ
harbor_docker_task = attrs.evolve(
    harbor_task,
    name="harbor_docker",
    description="Harbor / Terminal-Bench task directories in their own Docker image, built here with the FROM "
                "mapped to a local Debian base (named in the log); scored by the task's tests/test.sh in a fresh "
                "container.",
    load=load_docker,
    runtime="harbor_docker",
)
