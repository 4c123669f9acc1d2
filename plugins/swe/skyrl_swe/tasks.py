"""SWE tasks: ``swe`` (SWE-bench / Verified / Lite, SWE-Gym and generated rows, in the bubblewrap sandbox) and
``r2e_gym`` (R2E-Gym rows in their docker images), with the ``swe`` instruction builder."""

from __future__ import annotations

from skyrl_core import DataSpec, Instance, Task

from .data import load_instances

SYSTEM_PROMPT = (
    "You are a software engineer fixing an issue in a code repository. The repository is your working directory. "
    "Use the tools: `localize` first, with the whole issue text, for the files and functions to read; `search` to "
    "find code by name or structure, `bash` to run commands (tests, scripts), "
    "`str_replace_editor` to view and edit files. Make the smallest change to non-test files that resolves the "
    "issue, check it by running the relevant tests, then call `submit`.")

USER_TEMPLATE = """<issue>
{problem_statement}
</issue>

The repository {repo} is checked out in the working directory. Resolve the issue above by editing the source
files (tests are already in place; do not edit them). Steps: 1) locate the relevant code (`localize` with the
issue text), 2) reproduce the problem, 3) fix it, 4) rerun the tests, 5) call `submit`."""


def build_swe_instructions(instance: Instance, task: Task) -> list[dict]:
    """System and user messages for one repository instance (the issue text verbatim)."""
    data = instance.data
    return [{"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": USER_TEMPLATE.format(problem_statement=data.get("problem_statement", "").strip(),
                                                             repo=data.get("repo") or "under test")}]


def _load(spec: DataSpec) -> list[Instance]:
    return load_instances(spec)


def _load_docker(spec: DataSpec) -> list[Instance]:
    import attrs

    options = {"runtime": "docker", "allow_clone": False, **spec.options}
    return load_instances(attrs.evolve(spec, options=options))


# localize leads: an agent's first call (the whole issue text in, ranked files and functions out)
SWE_TOOLS = ("localize", "bash", "str_replace_editor", "search", "submit")

swe_task = Task(
    name="swe",
    description="Resolve a repository issue (SWE-bench/SWE-Gym/generated rows); reward 1 when the tests pass.",
    load=_load,
    instruction_builder="swe",
    tools=SWE_TOOLS,
    verifier="swe_tests",
    runtime="swe_sandbox",
    default_data=DataSpec(split="test"),
    content_fields=("problem_statement",),
)

r2e_gym_task = Task(
    name="r2e_gym",
    description="Resolve an R2E-Gym issue in its docker image; reward 1 when the expected tests pass.",
    load=_load_docker,
    instruction_builder="swe",
    tools=SWE_TOOLS,
    verifier="swe_tests",
    runtime="docker",
    default_data=DataSpec(split="train"),
    content_fields=("problem_statement",),
)
