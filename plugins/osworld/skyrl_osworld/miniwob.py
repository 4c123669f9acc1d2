"""MiniWoB++ tasks from the ``miniwob`` package (Farama Foundation, MIT licence), offline.

The package ships its task pages inside the wheel (``miniwob/html/miniwob/<task>.html``); they are opened as
``file://`` URLs in the browser runtime. One episode (what the package's own Selenium driver does, done here
through Playwright): ``Math.seedrandom(seed)``, a long ``core.EPISODE_MAX_TIME`` so model latency is not a
time-out, ``core.startEpisodeReal()``, wait for ``WOB_TASK_READY``; the instruction is ``core.getUtterance()``.
The verifier reads the page's own result afterwards: ``WOB_DONE_GLOBAL``, ``WOB_RAW_REWARD_GLOBAL`` (1 for
success, -1 for failure, partial credit in between on some tasks) and ``WOB_REWARD_REASON``.

Instances are ``(task type, seed)`` pairs: ``test`` seeds start at 0, ``train`` seeds at 10000, so the splits
never share a problem. Instances are interleaved by seed (every type's seed 0, then every type's seed 1, ...),
so ``limit: 10`` over ten types gives one instance of each.
"""

from __future__ import annotations

import asyncio
import contextvars
from pathlib import Path
from typing import Any

from skyrl_core.errors import ConfigError
from skyrl_core.tasks import DataSpec, Instance

# The ten (and more) types the scripted policy solves; all single-screen tasks of the 160 x 210 MiniWoB area.
DEFAULT_TASKS = ("click-button", "click-checkboxes", "enter-text", "login-user", "choose-list", "click-tab",
                 "focus-text", "use-autocomplete", "click-link", "enter-password")
WIDTH, HEIGHT = 160, 210
TRAIN_SEED_BASE = 10000
EPISODE_MAX_TIME_S = 600.0

# the runtime that the current init stage just prepared (set in prepare(), read by the instruction builder,
# which the core calls right after prepare() in the same task, without the runtime)
current_runtime: contextvars.ContextVar[Any] = contextvars.ContextVar("skyrl_osworld_current_runtime",
                                                                     default=None)


def html_dir() -> Path:
    """The MiniWoB++ task pages inside the installed ``miniwob`` package."""
    import miniwob

    path = Path(miniwob.__file__).parent / "html" / "miniwob"
    if not path.is_dir():
        raise FileNotFoundError(f"the miniwob package at {Path(miniwob.__file__).parent} has no html/miniwob/; "
                                f"install miniwob==1.1.0")
    return path


def available_tasks() -> list[str]:
    """Every MiniWoB++ task type the package ships (file stems of its pages)."""
    return sorted(p.stem for p in html_dir().glob("*.html"))


def load_miniwob(spec: DataSpec) -> list[Instance]:
    """Instances for ``spec``. ``options``: ``tasks`` (list of task types; default DEFAULT_TASKS),
    ``seeds_per_task`` (default 10). Raises ConfigError naming an unknown task type and the valid ones."""
    opts = dict(spec.options or {})
    unknown = sorted(set(opts) - {"tasks", "seeds_per_task", "episode_max_time_s"})
    if unknown:
        raise ConfigError(f"data.options {unknown} are not understood by the miniwob task; valid: tasks, "
                          f"seeds_per_task, episode_max_time_s")
    tasks = list(opts.get("tasks") or DEFAULT_TASKS)
    per_task = int(opts.get("seeds_per_task", 10))
    if per_task < 1:
        raise ConfigError(f"data.options.seeds_per_task must be at least 1, got {per_task}")
    pages = html_dir()
    known = set(available_tasks())
    bad = [t for t in tasks if t not in known]
    if bad:
        raise ConfigError(f"unknown MiniWoB++ task type(s) {bad}; the miniwob package ships {len(known)}: "
                          f"{', '.join(sorted(known))}")
    base = TRAIN_SEED_BASE if spec.split == "train" else 0
    max_time = float(opts.get("episode_max_time_s", EPISODE_MAX_TIME_S))
    out = []
    for k in range(per_task):
        for task in tasks:
            seed = base + k
            out.append(Instance(id=f"{task}/{seed}", data={
                "kind": "miniwob", "task": task, "seed": seed, "url": (pages / f"{task}.html").as_uri(),
                "width": WIDTH, "height": HEIGHT, "episode_max_time_s": max_time}))
    return out


async def start_episode(runtime: Any, data: dict, ready_timeout_s: float = 10.0) -> str:
    """Open the task page in ``runtime`` (a BrowserRuntime-like object with ``goto``/``evaluate``), seed it
    and start the episode. Stores the instruction on ``runtime.instruction`` and returns it. Raises
    RuntimeError when the task never reports ready."""
    await runtime.goto(data["url"], int(data.get("width", WIDTH)), int(data.get("height", HEIGHT)))
    max_ms = int(float(data.get("episode_max_time_s", EPISODE_MAX_TIME_S)) * 1000)
    await runtime.evaluate(f"() => {{ Math.seedrandom({int(data['seed'])}); core.EPISODE_MAX_TIME = {max_ms}; "
                           f"core.startEpisodeReal(); }}")
    loop = asyncio.get_running_loop()
    deadline = loop.time() + ready_timeout_s
    while not await runtime.evaluate("() => WOB_TASK_READY === true"):
        if loop.time() > deadline:
            raise RuntimeError(f"MiniWoB++ task {data['task']} not ready after {ready_timeout_s:g} s")
        await asyncio.sleep(0.05)
    runtime.instruction = str(await runtime.evaluate("() => core.getUtterance()"))
    runtime.task_url = data["url"]
    current_runtime.set(runtime)
    return runtime.instruction


async def episode_result(runtime: Any) -> dict[str, Any]:
    """The page's own verdict: ``done`` (bool), ``raw_reward`` (float in [-1, 1]), ``reward`` (MiniWoB's
    time-discounted reward) and ``reason``. Read with the task's globals; the agent cannot run scripts."""
    state = await runtime.evaluate("() => ({done: WOB_DONE_GLOBAL, raw: WOB_RAW_REWARD_GLOBAL, "
                                   "reward: WOB_REWARD_GLOBAL, reason: WOB_REWARD_REASON})")
    return {"done": bool(state.get("done")), "raw_reward": float(state.get("raw") or 0.0),
            "reward": float(state.get("reward") or 0.0), "reason": state.get("reason")}
