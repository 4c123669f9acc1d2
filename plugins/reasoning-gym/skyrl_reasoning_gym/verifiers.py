"""Verifier ``reasoning_gym_score``: reasoning-gym's own ``score_answer`` of the family, run in a fresh sandbox.

Why a sandbox: several families' scorers execute the answer they score — ``eval(answer)`` in
``string_insertion``, ``spiral_matrix`` and ``binary_matrix``, ``sympy.parse_expr(answer)`` in the integration
and polynomial families (reasoning-gym 0.1.25). The answer is the agent's, so it is hostile: it is scored in a
new bubblewrap sandbox (no network, bounded CPU time and memory, no file the agent touched), by
``python -I`` (no working directory or environment on the module path), which regenerates the item from its
family, config, seed and index rather than trusting anything else, and scores it.

Before that, on the host, an answer is refused unscored:
- longer than ``max(MAX_ANSWER_CHARS, 4 x the reference)`` characters: reward 0 (``answer_too_long``);
- Python that would call or reach anything beyond arithmetic and a few pure builtins (attribute access,
  dunder names, ``print``, ``open``, ``exec``, ``__import__``, ...), or powers too large to compute: reward 0,
  outcome ``tampered``, since a scorer that evaluates it would run the agent's code with the power to print its
  own verdict or to exhaust the scorer.

Outcomes (``skyrl_core.tasks.VerifierResult``): ``scored`` with the scorer's float in [0, 1] (some families give
partial credit); ``unverifiable`` when the scorer raised, timed out, returned no finite number in [0, 1], or the
regenerated item is not the instance's (the trajectory is then loss-masked, not trained as a 0).
"""

from __future__ import annotations

import ast
import builtins
import json
import math
import re
import sys
from typing import Any

from skyrl_core import VerifierResult
from skyrl_core.tasks import Instance

MAX_ANSWER_CHARS = 2000
SCORE_TIMEOUT_S = 60.0
# builtins an answer may call (pure, no I/O, no reflection); every other builtin name is refused
SAFE_CALLS = frozenset({"abs", "min", "max", "round", "pow", "int", "float", "sum", "len", "sorted", "list",
                        "tuple", "set", "range", "bool", "str", "complex", "divmod"})
# ``**`` and ``<<`` only with a constant exponent up to MAX_EXPONENT, at most MAX_POWERS of them (9**9**9**9 is a
# CPU and memory bomb for a scorer that evaluates it)
MAX_EXPONENT = 64
MAX_POWERS = 4
_CALL = re.compile(r"(?<![\w.])([A-Za-z_]\w*)\s*\(")
_METHOD_CALL = re.compile(r"\.\s*([A-Za-z_]\w*)\s*\(")
_RESULT = "SKYRL_RG_RESULT "
_ANSWER_TAG = re.compile(r"<answer>\s?(.*?)\s?</answer>", re.S)

# Runs inside the sandbox: stdin {"dataset", "config", "seed", "size", "index", "question", "answer"}; prints one
# result line. The answer's code cannot reach this process unless the pre-check above was wrong; the sandbox is the
# second wall.
_SCORER = r"""
import json, math, sys
p = json.loads(sys.stdin.read())
import reasoning_gym
ds = reasoning_gym.create_dataset(p["dataset"], **p["config"], seed=p["seed"], size=p["size"])
entry = ds[p["index"]]
out = {"same_item": entry["question"] == p["question"]}
try:
    score = ds.score_answer(p["answer"], entry)
    out["score"] = float(score)
except Exception as exc:
    out["error"] = f"{type(exc).__name__}: {exc}"[:500]
sys.stdout.write("\n" + "SKYRL_RG_RESULT " + json.dumps(out) + "\n")
"""


def extract_answer(trajectory: Any) -> tuple[str | None, str]:
    """The agent's answer and where it came from: ``trajectory.answer`` (the finish tool), else the last
    ``<answer>...</answer>`` of the final assistant message, else that message stripped. (None, "none") when
    there is no answer."""
    answer = getattr(trajectory, "answer", None)
    if answer not in (None, ""):
        return str(answer).strip(), "finish"
    for message in reversed(getattr(trajectory, "messages", None) or []):
        if message.get("role") != "assistant":
            continue
        content = message.get("content") or ""
        if isinstance(content, list):
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        if content.strip():
            tagged = _ANSWER_TAG.findall(content)
            return (tagged[-1].strip(), "answer_tag") if tagged else (content.strip(), "message")
        break
    return None, "none"


def code_in_answer(answer: str) -> str | None:
    """Why ``answer`` is code a scorer must not run (a short reason), or None when it is plain data.

    Refused anywhere in the text: a dunder name, a call of a builtin outside ``SAFE_CALLS`` (``print(``,
    ``open(``), a method call (``.read(``). Refused where the text parses as Python: attribute access, lambda,
    walrus, and ``**`` / ``<<`` beyond ``MAX_POWERS`` or with an exponent that is not a constant up to
    ``MAX_EXPONENT``. Plain data: text that is not Python, or literals, operators, names and calls of
    ``SAFE_CALLS`` or of non-builtin names (``sin(x)``: the math sympy-based scorers read)."""
    if "__" in answer:
        return "a dunder name"
    # calls, read from the raw text: sympy's parse_expr rewrites text that is not Python ("print('x')!" becomes
    # factorial(print('x'))), so a call must be refused even where the whole answer does not parse
    for name in _CALL.findall(answer):
        if hasattr(builtins, name) and name not in SAFE_CALLS:
            return f"a call of the builtin '{name}'"
    method = _METHOD_CALL.search(answer)
    if method:
        return f"a method call '.{method.group(1)}('"
    try:
        tree = ast.parse(answer.strip(), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None  # not Python: eval raises, parse_expr's transforms only make symbols of words
    powers = 0
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            return f"attribute access '.{node.attr}'"
        if isinstance(node, (ast.Lambda, ast.NamedExpr, ast.Await, ast.Yield, ast.YieldFrom)):
            return f"a {type(node).__name__.lower()} expression"
        if isinstance(node, ast.Name) and hasattr(builtins, node.id) and node.id not in SAFE_CALLS:
            return f"the builtin '{node.id}'"
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Pow, ast.LShift)):
            powers += 1
            exponent = node.right.operand if isinstance(node.right, ast.UnaryOp) else node.right
            if powers > MAX_POWERS or not (isinstance(exponent, ast.Constant)
                                           and isinstance(exponent.value, (int, float))
                                           and abs(exponent.value) <= MAX_EXPONENT):
                return "a power too large to compute"
    return None


def _payload(instance: Instance, answer: str) -> dict[str, Any]:
    data = instance.data
    return {"dataset": data["dataset"], "config": data["config"], "seed": data["dataset_seed"],
            "size": data["size"], "index": data["index"], "question": data["question"], "answer": answer}


async def _score_in_sandbox(payload: dict[str, Any]) -> dict[str, Any]:
    from skyrl_core.default_plugins.runtimes.sandbox import LocalSandbox
    from skyrl_core.runtime import RuntimeSpec

    spec = RuntimeSpec(type="sandbox", cpu_time_s=int(SCORE_TIMEOUT_S), memory_mb=4096, max_processes=64,
                       disk_mb=64, tmp_mb=64, max_output_chars=8000)
    sandbox = LocalSandbox(spec)
    try:
        await sandbox.start()
        res = await sandbox.exec([sys.executable, "-I", "-c", _SCORER], timeout_s=SCORE_TIMEOUT_S,
                                 stdin=json.dumps(payload), env={"PYTHONHASHSEED": "0"})
    except Exception as exc:  # no sandbox here, a lost process: the infrastructure, not the answer
        return {"error": f"the scoring sandbox failed: {type(exc).__name__}: {exc}"[:600]}
    finally:
        await sandbox.close()
    lines = [line for line in res.output.splitlines() if line.startswith(_RESULT)]
    if res.exit_code != 0 or len(lines) != 1:
        detail = ", ".join(res.limits) or f"exit {res.exit_code}"
        return {"error": f"the scorer process failed ({detail}): {res.output[-400:]}"}
    return json.loads(lines[0][len(_RESULT):])


async def reasoning_gym_score(trajectory: Any, runtime: Any = None, instance: Instance | None = None
                              ) -> VerifierResult:
    """Verifier ``reasoning_gym_score``: the family's ``score_answer(answer, entry)`` as the reward (a float in
    [0, 1]), under the outcome contract in the module docstring. ``runtime`` (the trajectory's sandbox) is not
    used: scoring gets a fresh one. Metrics: ``answer_source``, ``answer_chars``, ``score``, ``correct``
    (score == 1), ``refused`` (why an answer was not scored). Raises ValueError without an instance."""
    if instance is None:
        instance = getattr(runtime, "instance", None)
    if instance is None:
        raise ValueError("verifier 'reasoning_gym_score' needs the task instance (its family, seed and index)")
    answer, source = extract_answer(trajectory)
    metrics: dict[str, Any] = {"answer_source": source, "answer_chars": len(answer or ""),
                               "dataset": instance.data["dataset"]}
    if answer is None:
        return VerifierResult(reward=0.0, metrics={**metrics, "score": 0.0, "correct": False, "refused": "none"})
    limit = max(MAX_ANSWER_CHARS, 4 * len(instance.data["answer"]))
    if len(answer) > limit:
        return VerifierResult(reward=0.0, metrics={**metrics, "score": 0.0, "correct": False,
                                                   "refused": f"answer_too_long (> {limit} chars)"})
    why = code_in_answer(answer)
    if why:
        return VerifierResult.tampered(f"the answer is code a scorer would run: {why}",
                                       {**metrics, "score": 0.0, "correct": False, "refused": "code"})
    out = await _score_in_sandbox(_payload(instance, answer))
    if "error" in out:
        return VerifierResult.unverifiable(f"reasoning-gym's scorer failed: {out['error']}", metrics)
    if not out.get("same_item"):
        return VerifierResult.unverifiable("the regenerated reasoning-gym item differs from the instance "
                                           "(a family that does not generate deterministically)", metrics)
    score = out.get("score")
    if not isinstance(score, (int, float)) or not math.isfinite(score) or not 0.0 <= score <= 1.0:
        return VerifierResult.unverifiable(f"reasoning-gym's scorer returned {score!r}, not a number in [0, 1]",
                                           metrics)
    return VerifierResult(reward=float(score), metrics={**metrics, "score": float(score), "correct": score == 1.0})
