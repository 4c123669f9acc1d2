"""Four trainers side by side: the same GSM8K-steps rows trained for two steps by skyrl's local trainer, SkyRL-train's
own trainer, VeRL's own trainer and the Tinker bridge on the plugin's local Tinker server. Writes one PNG (reward,
policy loss and gradient norm against step, one line per backend), a markdown table (seconds per step, peak
resident memory of the whole process tree, per-step values; printed) and the results as JSON beside the PNG.

Every backend trains the rows of ``plugins/verl/skyrl_verl/examples/gsm8k-cpu.yaml`` (gsm8k_steps, train limit 4
shuffled with seed 0, 2 instances x 2 samples a step, 24 tokens per call, 2 turns): ``local`` is that config with
``backend.type=local``, ``skyrl-train`` is ``skyrl-train:gsm8k-cpu`` (the same task, rows and settings),
``verl`` is ``skyrl verl launch verl:gsm8k-cpu`` and ``tinker`` is the plugin's ``gsm8k-steps`` example with the
rows and sampling set to the same values (LoRA r 16, Tinker's PPO loss, against ``skyrl tinker serve-local``).
Each backend runs in its own venv (the ones each plugin's ci.sh builds at the repo root: ``.venv-verl``,
``.venv-skyrl-train``, ``.venv-tinker`` + ``.venv-tinker-server``; the local backend in the current interpreter)
with this checkout first on PYTHONPATH. A backend whose venv is missing or whose run fails gets a table row saying
why; the others still run.

    python tests/benchmarks/bench_trainers.py --out docs/img/trainers.png [--backends local,skyrl-train,verl,tinker]
        [--venvs DIR] [--work DIR]

The backends' algorithms differ (local/VeRL/SkyRL-train: GRPO with PPO-clip, KL and entropy terms, full
fine-tuning at lr 1e-5; Tinker: RLOO, LoRA, lr 1e-4), and two steps of 4 trajectories are a smoke, not a learning
curve: the figure shows that each trainer ran on the same rows and what each reported, not which learns better.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VERL_CONFIG = ROOT / "plugins/verl/skyrl_verl/examples/gsm8k-cpu.yaml"
TINKER_CONFIG = ROOT / "plugins/tinker/skyrl_tinker/examples/gsm8k-steps.yaml"
TINKER_ROWS = ["tasks.0.data.limit=4", "sampling.max_tokens=24", "sampling.n_samples=2", "train.batch_size=2",
               "agent.max_context_tokens=1024", "train.checkpoint_every=0", "train.steps=2"]
BACKENDS = ("local", "skyrl-train", "verl", "tinker")
# per backend: where its reward / policy loss / gradient norm / step seconds sit in the rows it reports
KEYS = {
    "local": {"reward": "reward_mean", "loss": "train/loss", "grad_norm": "train/grad_norm", "step_s": "step_s"},
    "tinker": {"reward": "reward_mean", "loss": "train/loss", "grad_norm": None, "step_s": "step_s"},
    "verl": {"reward": "critic/score/mean", "loss": "actor/pg_loss", "grad_norm": "actor/grad_norm",
             "step_s": "timing_s/step"},
    "skyrl-train": {"reward": "reward/avg_raw_reward", "loss": "policy/policy_loss",
                    "grad_norm": "policy/grad_norm", "step_s": "timing/step"},
}
STYLE = {"local": {"color": "tab:blue", "marker": "o", "markersize": 9},
         "skyrl-train": {"color": "tab:orange", "marker": "s", "markersize": 7},
         "verl": {"color": "tab:green", "marker": "^", "markersize": 6, "linestyle": "--"},
         "tinker": {"color": "tab:red", "marker": "x", "markersize": 8, "linestyle": ":"}}
LAUNCH_VERL = ("import json, sys; from skyrl_core.config import load_config; from skyrl_verl.launcher import launch; "
               "r = launch(load_config(sys.argv[1], []), output_dir=sys.argv[2]); "
               "print('BENCH_REPORT ' + json.dumps(r))")
LAUNCH_SKYRL_TRAIN = ("import json, sys; from skyrl_core.config import load_config; "
                      "from skyrl_skyrl_train.launcher import launch; "
                      "r = launch(load_config(sys.argv[1], []), output=sys.argv[2]); "
                      "print('BENCH_REPORT ' + json.dumps(r, default=str))")


def _tree_rss_mb(root: int) -> float:
    """Resident memory (MiB) of ``root`` and every descendant (Ray's raylet, workers and actors included)."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            fields = stat[stat.rindex(")") + 2:].split()
            children.setdefault(int(fields[1]), []).append(int(entry))
            rss[int(entry)] = int(fields[21]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, IndexError):
            continue
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        total += rss.get(pid, 0)
        todo.extend(children.get(pid, []))
    return total / 2**20


def _run(argv: list[str], env: dict, log: Path, timeout: float) -> tuple[int, float, float]:
    """Run ``argv``, output to ``log``; returns (exit code, wall seconds, peak tree RSS MiB)."""
    peak = [0.0]
    with log.open("w") as f:
        start = time.monotonic()
        proc = subprocess.Popen(argv, env=env, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT)
        done = threading.Event()

        def sample() -> None:
            while not done.wait(1.0):
                peak[0] = max(peak[0], _tree_rss_mb(proc.pid))

        threading.Thread(target=sample, daemon=True).start()
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            rc = proc.wait()
        done.set()
        return rc, time.monotonic() - start, peak[0]


def _env(plugin: str | None) -> dict:
    path = [str(ROOT)] + ([str(ROOT / "plugins" / plugin)] if plugin else [])
    if os.environ.get("PYTHONPATH"):
        path.append(os.environ["PYTHONPATH"])
    return {**os.environ, "PYTHONPATH": ":".join(path), "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.exists() else []


def _report_line(log: Path) -> dict:
    lines = [x for x in log.read_text(errors="replace").splitlines() if x.startswith("BENCH_REPORT ")]
    return json.loads(lines[-1][len("BENCH_REPORT "):]) if lines else {}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_backend(name: str, venvs: Path, work: Path, timeout: float) -> dict:
    """Train two steps with backend ``name``; returns {"rows": [per-step dicts], "wall_s", "peak_rss_mb"} or
    {"error": why}."""
    out = work / name
    log = work / f"{name}.log"
    out.mkdir(parents=True, exist_ok=True)
    if name == "local":
        argv = [sys.executable, "-m", "skyrl_core.cli", "train", str(VERL_CONFIG), "backend.type=local",
                "--output", str(out)]
        rc, wall, peak = _run(argv, _env(None), log, timeout)
    elif name in ("verl", "skyrl-train"):
        venv = venvs / (".venv-verl" if name == "verl" else ".venv-skyrl-train")
        if not (venv / "bin/python").exists():
            return {"error": f"no venv at {venv} (build it with plugins/{name}/ci.sh --setup)"}
        code, cfg = (LAUNCH_VERL, VERL_CONFIG) if name == "verl" else (
            LAUNCH_SKYRL_TRAIN, ROOT / "plugins/skyrl-train/skyrl_skyrl_train/examples/gsm8k-cpu.yaml")
        rc, wall, peak = _run([str(venv / "bin/python"), "-c", code, str(cfg), str(out)],
                              _env("verl" if name == "verl" else "skyrl-train"), log, timeout)
    else:  # tinker: the plugin's local server, then skyrl's loop with engine and backend tinker
        venv, server_venv = venvs / ".venv-tinker", venvs / ".venv-tinker-server"
        if not (venv / "bin/python").exists() or not (server_venv / "bin/python").exists():
            return {"error": f"no venvs at {venv} / {server_venv} (build them with plugins/tinker/ci.sh --setup)"}
        port = _free_port()
        env = {**_env("tinker"), "SKYRL_TINKER_SERVER_VENV": str(server_venv), "TINKER_TELEMETRY": "0"}
        server_log = (work / "tinker-server.log").open("w")
        serve = [str(venv / "bin/python"), "-m", "skyrl_core.cli", "tinker", "serve-local", "--port", str(port),
                 "--workdir", str(work / "tinker-server")]
        server = subprocess.Popen(serve, env=env, stdout=server_log, stderr=subprocess.STDOUT, cwd=ROOT)
        try:
            deadline = time.monotonic() + 900
            while time.monotonic() < deadline and server.poll() is None:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=2).close()
                    break
                except OSError:
                    time.sleep(2)
            if server.poll() is not None:
                return {"error": f"the local Tinker server exited (rc {server.returncode}); "
                                 f"see {work}/tinker-server.log"}
            env.update(TINKER_BASE_URL=f"http://127.0.0.1:{port}", TINKER_API_KEY="tml-local")
            argv = [str(venv / "bin/python"), "-m", "skyrl_core.cli", "train", str(TINKER_CONFIG), *TINKER_ROWS,
                    "--output", str(out)]
            rc, wall, peak = _run(argv, env, log, timeout)
            peak += _tree_rss_mb(server.pid)  # the server's (last) footprint: API + JAX engine
        finally:
            server.terminate()
            try:
                server.wait(timeout=60)
            except subprocess.TimeoutExpired:
                server.kill()
            server_log.close()
    run = {"exit_code": rc, "wall_s": wall, "peak_rss_mb": peak}
    (work / f"{name}.run.json").write_text(json.dumps(run))
    return parse_backend(name, work)


def _step_rows(name: str, work: Path) -> list[dict]:
    """The per-step rows backend ``name`` reported in its run under ``work``."""
    if name in ("local", "tinker"):
        return [r for r in _jsonl(work / name / "metrics.jsonl") if r.get("kind") == "train"]
    report = _report_line(work / f"{name}.log")
    prefix = "actor/" if name == "verl" else "policy/"  # a training step's row (eval rows have none)
    return [m for m in report.get("metrics", []) if any(k.startswith(prefix) for k in m)]


def parse_backend(name: str, work: Path) -> dict:
    """The result of backend ``name``'s finished run under ``work`` (see :func:`run_backend`)."""
    run = json.loads((work / f"{name}.run.json").read_text())
    rc, wall, peak = run["exit_code"], run["wall_s"], run["peak_rss_mb"]
    log = work / f"{name}.log"
    rows = _step_rows(name, work)
    tail = " | ".join(log.read_text(errors="replace").strip().splitlines()[-2:])[-240:]
    if not rows:
        return {"error": f"exit code {rc}, no step logged: {tail}", "wall_s": wall}
    keys = KEYS[name]
    per_step = [{"step": int(r["step"]), **{k: (float(r[src]) if src and src in r else None)
                                            for k, src in keys.items()}} for r in rows]
    # a run that logged its steps but exited non-zero (the local trainer does when no step moved the policy)
    # keeps its rows, with the reason
    return {"rows": per_step, "wall_s": wall, "peak_rss_mb": peak, "exit_code": rc,
            **({"note": log.read_text(errors="replace").strip().splitlines()[-1][-200:]} if rc else {})}


def write_figure(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(12, 3.6))
    for ax, (key, title) in zip(axes, (("reward", "mean reward"), ("loss", "policy loss"),
                                       ("grad_norm", "gradient norm"))):
        for name, res in results.items():
            pts = [(r["step"], r[key]) for r in res.get("rows", []) if r.get(key) is not None]
            if pts:  # one colour and marker per backend on every panel; overlapping lines stay visible
                ax.plot(*zip(*pts), label=name, **STYLE[name])
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.set_xticks([1, 2])
    handles = {h.get_label(): h for ax in axes for h in ax.get_lines()}
    if handles:
        fig.legend(list(handles.values()), list(handles), loc="lower center", ncol=len(handles), fontsize=8)
    fig.suptitle("Same GSM8K-steps rows, two steps per backend (SmolLM2-135M, CPU)", fontsize=10)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=80)


def table(results: dict) -> str:
    def fmt(x: float | None, spec: str = ".3g") -> str:
        return "—" if x is None else format(x, spec)

    lines = ["| backend | s / step (1, 2) | wall s | peak RSS MiB | reward (1, 2) | loss (1, 2) | grad norm (1, 2) "
             "| note |", "|---|---|---|---|---|---|---|---|"]
    for name, res in results.items():
        if "error" in res:
            lines.append(f"| {name} | — | — | — | — | — | — | did not run: {res['error']} |")
            continue
        rows = res["rows"]

        def pair(key: str, spec: str = ".3g") -> str:
            return ", ".join(fmt(r[key], spec) for r in rows)

        lines.append(f"| {name} | {pair('step_s', '.0f')} | {res['wall_s']:.0f} | {res['peak_rss_mb']:.0f} | "
                     f"{pair('reward')} | {pair('loss')} | {pair('grad_norm')} | "
                     f"{('exit ' + str(res['exit_code']) + ': ' + res['note']) if res.get('note') else ''} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(ROOT / "docs/img/trainers.png"), help="the PNG; the results' .json beside it")
    ap.add_argument("--backends", default=",".join(BACKENDS))
    ap.add_argument("--venvs", default=str(ROOT), help="directory holding the plugins' .venv-* (default: repo root)")
    ap.add_argument("--work", default="/tmp/bench-trainers", help="run directories and logs")
    ap.add_argument("--timeout", type=float, default=3600, help="seconds per backend")
    ap.add_argument("--reparse", action="store_true", help="only rebuild the figure and table from --work's runs")
    args = ap.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    results = {}
    for name in args.backends.split(","):
        if name not in BACKENDS:
            raise SystemExit(f"--backends: unknown backend {name!r}; choose from {', '.join(BACKENDS)}")
        print(f"[bench] {name} ...", flush=True)
        if args.reparse:
            results[name] = parse_backend(name, work) if (work / f"{name}.run.json").exists() else {
                "error": f"no run in {work}"}
        else:
            results[name] = run_backend(name, Path(args.venvs), work, args.timeout)
        print(f"[bench] {name}: {json.dumps(results[name])[:400]}", flush=True)
        out = Path(args.out)  # written after each backend: a later one's failure keeps the earlier results
        write_figure(results, out)
        md = table(results)
        out.with_suffix(".json").write_text(json.dumps(results, indent=1) + "\n")
    print(md)


if __name__ == "__main__":
    main()
