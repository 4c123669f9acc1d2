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


def _load_for_mini(spec: DataSpec) -> list[Instance]:
    """The ``swe`` rows, each carrying the harness's settings (``data.options.mini_swe_agent``, checked here so a
    bad key fails at load, naming it)."""
    import attrs

    from .mini_harness import settings

    options = dict(spec.options)
    mini = settings(options.pop("mini_swe_agent", None))
    rows = load_instances(attrs.evolve(spec, options=options))
    for row in rows:
        row.data["mini_swe_agent"] = mini
    return rows


def build_mini_swe_agent_instructions(instance: Instance, task: Task) -> list[dict]:
    """The trajectory's opening message before the run, for display: the issue text (mini-swe-agent sends its own
    prompts; the trajectory's messages become what the gateway recorded)."""
    return [{"role": "user", "content": instance.data.get("problem_statement", "").strip()}]


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

async def _mini_swe_agent(base_url, trajectory, runtime, instance=None, sampling=None):
    from .mini_harness import run_mini_swe_agent  # imports mini-swe-agent (and litellm) only when a run uses it

    await run_mini_swe_agent(base_url, trajectory, runtime, instance=instance, sampling=sampling)


mini_swe_agent_task = Task(
    name="mini_swe_agent",
    description="The swe rows solved by mini-swe-agent (unmodified) as an external harness through the recording "
                "gateway, its commands in the sandbox; reward 1 when the tests pass.",
    load=_load_for_mini,
    instruction_builder="mini_swe_agent",
    tools=(),
    verifier="swe_tests",
    runtime="swe_sandbox",
    default_data=DataSpec(split="test"),
    content_fields=("problem_statement",),
    harness=_mini_swe_agent,
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
