"""GSM8K (Cobbe et al. 2021, arXiv 2110.14168): loading, the calculation-step variant, and reading numbers.

The test (1319 rows) and train (7473 rows) splits ship inside the package
(``skyrl_core/default_plugins/gsm8k/data``, MIT licence, see its SOURCE.txt), so a fresh install runs offline. A ``DataSpec`` may instead point at any file or folder
(``path``: jsonl, json, or parquet when pandas/pyarrow are installed) or at a Hugging Face ``datasets`` name
(``name``; needs the ``datasets`` package and a network).

Two tasks are built from it (registered by ``skyrl_core.default_plugins.gsm8k``):

- ``gsm8k``: the word problems. Instance data ``{"question", "answer" (the final number as a string, commas
  removed), "solution" (the worked answer), "steps" (how many ``<<...>>`` calculations it uses)}``;
  option ``max_steps`` / ``min_steps`` keeps problems by that count.
- ``gsm8k_steps``: every ``<<48/2=24>>`` calculation annotation of the worked answers posed as its own question
  ("Calculate 48/2.", answer "24"). Ids are ``<row>-<k>`` (row in the split file, k-th annotation in it).
  Options: ``single_op`` (only one arithmetic operator), ``ops`` (allowed operators, default ``+-*/``),
  ``verified`` (default True: drop annotations whose expression does not evaluate to the stated result, e.g.
  rounded ones), ``max_per_question``.
"""

from __future__ import annotations

import ast
import functools
import importlib.resources
import json
import math
import operator
import re
from pathlib import Path
from typing import Any, Iterable

from skyrl_core.errors import ConfigError, MissingExtraError
from skyrl_core.tasks import DataSpec, Instance

SPLITS = ("test", "train")
HF_NAMES = {"gsm8k": ("openai/gsm8k", "main"), "openai/gsm8k": ("openai/gsm8k", "main")}
REL_TOL = 1e-6

_CALC = re.compile(r"<<([^<>=]*)=([^<>]*)>>")


# ---------------------------------------------------------------------------------------------------- numbers

# A minus sign counts only where it cannot be subtraction or a range ("10-12" is not -12).
_NUM = r"(?:(?<![\w).])-)?\$?\s?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|(?:(?<![\w).])-)?\$?\.\d+"
_NUMBER_RE = re.compile(_NUM)
_FRACTION_RE = re.compile(r"^\s*(?P<a>-?\d+(?:\.\d+)?)\s*/\s*(?P<b>\d+(?:\.\d+)?)\s*$")


def _to_float(token: str) -> float | None:
    cleaned = token.replace(",", "").replace("$", "").replace(" ", "")
    try:
        value = float(cleaned)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def extract_number(text: Any) -> float | None:
    """The final number in an answer, or None.

    ``text`` may be a number or a string. For strings, in order: the whole string as one number (``"1,234"``,
    ``"$18.00"``, ``"50%"``, ``"18."``), a fraction (``"3/4"``), the content of ``\\boxed{...}``, what follows
    ``####``, "answer is ...", and finally the last number in the text ("15 dollars" -> 15).
    """
    if isinstance(text, bool) or text is None:
        return None
    if isinstance(text, (int, float)):
        return float(text) if math.isfinite(float(text)) else None
    if not isinstance(text, str):
        text = str(text)
    text = text.strip()
    if not text:
        return None
    plain = text.rstrip(".").rstrip("%").strip()
    if re.fullmatch(_NUM, plain):
        return _to_float(plain)
    frac = _FRACTION_RE.match(plain)
    if frac and float(frac.group("b")) != 0:
        return float(frac.group("a")) / float(frac.group("b"))
    boxed = re.findall(r"\\boxed\{([^{}]*)\}", text)
    if boxed and boxed[-1].strip() != text:
        value = extract_number(boxed[-1])
        if value is not None:
            return value
    # "#### 18" and "the answer is 18 ...": the first number after the marker.
    for pattern in (r"####\s*([^\n]*)", r"answer\s*(?:is|:|=)[:\s]*([^\n]*)"):
        found = re.findall(pattern, text, flags=re.I)
        if found:
            numbers = _NUMBER_RE.findall(found[-1])
            if numbers:
                return _to_float(numbers[0])
    numbers = _NUMBER_RE.findall(text)
    return _to_float(numbers[-1]) if numbers else None


def format_number(value: float) -> str:
    """``24.0 -> "24"``, ``0.5 -> "0.5"``: how reference answers are stored."""
    if float(value).is_integer():
        return str(int(value))
    return repr(round(float(value), 10))


def numbers_match(a: float | None, b: float | None, rel_tol: float = REL_TOL) -> bool:
    """Equal within ``rel_tol`` relative to the reference ``b`` (absolute ``rel_tol`` near zero)."""
    if a is None or b is None:
        return False
    return abs(a - b) <= rel_tol * max(1.0, abs(b))


def final_answer(solution: str) -> str:
    """The number after ``####`` in a worked GSM8K answer, commas removed. Raises ValueError when absent."""
    if "####" not in solution:
        raise ValueError("no '#### <number>' line in the worked answer")
    value = extract_number(solution.rsplit("####", 1)[1])
    if value is None:
        raise ValueError(f"no number after '####': {solution.rsplit('####', 1)[1].strip()!r}")
    return format_number(value)


# ---------------------------------------------------------------------------------------------------- arithmetic

_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}
_OP_CHARS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "/", ast.Mod: "%",
             ast.Pow: "^"}


def _eval_node(node: ast.AST) -> float:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return float(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _eval_node(node.operand)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        left, right = _eval_node(node.left), _eval_node(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > 64:
            raise ValueError("exponent too large")
        return float(_BINOPS[type(node.op)](left, right))
    raise ValueError(f"not arithmetic: {ast.dump(node)[:60]}")


def _operators(node: ast.AST) -> list[str]:
    return [_OP_CHARS[type(n.op)] for n in ast.walk(node) if isinstance(n, ast.BinOp) and type(n.op) in _OP_CHARS]


def evaluate(expression: str) -> tuple[float, list[str]]:
    """Evaluate an arithmetic expression (numbers, ``+ - * / % ^``, parentheses) without ``eval``.

    Returns (value, operators used). Raises ValueError for anything else (names, calls, division by zero).
    """
    text = expression.replace(",", "").replace("^", "**").strip()
    try:
        tree = ast.parse(text, mode="eval")
        return _eval_node(tree.body), _operators(tree.body)
    except (SyntaxError, ZeroDivisionError, OverflowError, RecursionError) as exc:
        raise ValueError(f"cannot evaluate {expression!r}: {exc}") from None


def calculation_steps(solution: str) -> list[tuple[str, str]]:
    """The ``<<expression=result>>`` annotations of a worked answer, in order: [(expression, result)]."""
    return [(m.group(1).strip(), m.group(2).strip()) for m in _CALC.finditer(solution)]


# ---------------------------------------------------------------------------------------------------- loading


def _bundled_file(split: str) -> Path:
    if split not in SPLITS:
        raise ConfigError(f"GSM8K has no split '{split}'; data.split must be one of: {', '.join(SPLITS)}")
    return Path(str(importlib.resources.files("skyrl_core.default_plugins.gsm8k") / "data" / f"{split}.jsonl"))


def _file_in_dir(folder: Path, split: str) -> Path:
    for ext in (".jsonl", ".json", ".parquet"):
        candidate = folder / f"{split}{ext}"
        if candidate.is_file():
            return candidate
    raise ConfigError(f"data.path '{folder}' is a folder without {split}.jsonl, {split}.json or {split}.parquet "
                      f"(data.split is '{split}')")


@functools.lru_cache(maxsize=16)
def _read_file_cached(path: str, mtime_ns: int) -> tuple[dict, ...]:
    file = Path(path)
    suffix = file.suffix.lower()
    if suffix == ".jsonl":
        rows = []
        with file.open(encoding="utf-8") as fh:
            for lineno, line in enumerate(fh, 1):
                if line.strip():
                    try:
                        rows.append(json.loads(line))
                    except json.JSONDecodeError as exc:
                        raise ConfigError(f"data.path '{file}' line {lineno} is not JSON: {exc.msg}") from None
        return tuple(rows)
    if suffix == ".json":
        try:
            data = json.loads(file.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise ConfigError(f"data.path '{file}' is not JSON: {exc}") from None
        if isinstance(data, dict):
            data = data.get("data") or data.get("rows") or []
        if not isinstance(data, list):
            raise ConfigError(f"data.path '{file}' must hold a JSON list of rows")
        return tuple(data)
    if suffix == ".parquet":
        try:
            import pandas
        except ImportError:
            raise MissingExtraError(f"reading '{file}' needs pandas and pyarrow: pip install pandas pyarrow") from None
        return tuple(pandas.read_parquet(file).to_dict(orient="records"))
    raise ConfigError(f"data.path '{file}': unsupported file type '{suffix}'; use .jsonl, .json or .parquet")


def _read_hf(spec: DataSpec) -> list[dict]:
    try:
        import datasets
    except ImportError:
        raise MissingExtraError(f"data.name '{spec.name}' is a Hugging Face datasets name, which needs the "
                                f"'datasets' package and a network: pip install datasets. Offline, omit data.name "
                                f"to use the bundled GSM8K, or set data.path to a local file.") from None
    name, config = HF_NAMES.get(spec.name, (spec.name, spec.options.get("config")))
    try:
        ds = datasets.load_dataset(name, config, split=spec.split)
    except Exception as exc:  # network, unknown name or split: one clear message
        raise ConfigError(f"data.name '{spec.name}' (split '{spec.split}') could not be loaded with "
                          f"datasets.load_dataset: {type(exc).__name__}: {exc}") from None
    return [dict(row) for row in ds]


def read_rows(spec: DataSpec) -> list[dict]:
    """The raw rows ``{"question", "answer"}`` selected by ``spec`` (bundled split, a path, or a datasets name).

    Raises ConfigError (unknown split, missing file, bad JSON) or MissingExtraError (parquet without pandas,
    a datasets name without ``datasets``).
    """
    if spec.name:
        return _read_hf(spec)
    if spec.path:
        path = Path(spec.path).expanduser()
        if path.is_dir():
            path = _file_in_dir(path, spec.split)
        elif not path.is_file():
            raise ConfigError(f"data.path '{spec.path}' does not exist")
    else:
        path = _bundled_file(spec.split)
    return list(_read_file_cached(str(path.resolve()), path.stat().st_mtime_ns))


def _problem(row: Any, where: str) -> dict[str, Any]:
    if not isinstance(row, dict) or not isinstance(row.get("question"), str) or "answer" not in row:
        raise ConfigError(f"{where}: a GSM8K row needs 'question' (text) and 'answer' (worked answer ending "
                          f"'#### <number>', or the number)")
    raw = row["answer"]
    solution = str(row.get("solution") or "")
    if isinstance(raw, str) and "####" in raw:
        solution = raw
        try:
            answer = final_answer(raw)
        except ValueError as exc:
            raise ConfigError(f"{where}: {exc}") from None
    else:
        value = extract_number(raw)
        if value is None:
            raise ConfigError(f"{where}: 'answer' {raw!r} is not a number")
        answer = format_number(value)
    return {"question": row["question"].strip(), "answer": answer, "solution": solution,
            "steps": len(calculation_steps(solution))}


def _check_options(options: dict, allowed: Iterable[str], task: str) -> None:
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise ConfigError(f"task '{task}': unknown data.options {', '.join(unknown)}; valid: "
                          f"{', '.join(sorted(allowed))}")


def load_gsm8k(spec: DataSpec) -> list[Instance]:
    """Task ``gsm8k``: one Instance per word problem, id = row index in the split file (a string)."""
    _check_options(spec.options, ("max_steps", "min_steps", "config"), "gsm8k")
    max_steps = spec.options.get("max_steps")
    min_steps = int(spec.options.get("min_steps", 0))
    out = []
    for i, row in enumerate(read_rows(spec)):
        data = _problem(row, f"GSM8K row {i}")
        if data["steps"] < min_steps or (max_steps is not None and data["steps"] > int(max_steps)):
            continue
        out.append(Instance(id=str(i), data=data))
    return out


def load_gsm8k_steps(spec: DataSpec) -> list[Instance]:
    """Task ``gsm8k_steps``: each calculation annotation as a question; id ``<row>-<k>``."""
    _check_options(spec.options, ("single_op", "ops", "verified", "max_per_question", "config"), "gsm8k_steps")
    single_op = bool(spec.options.get("single_op", False))
    allowed_ops = set(str(spec.options.get("ops", "+-*/")))
    verified = bool(spec.options.get("verified", True))
    per_question = spec.options.get("max_per_question")
    out = []
    for i, row in enumerate(read_rows(spec)):
        problem = _problem(row, f"GSM8K row {i}")
        kept = 0
        for k, (expression, result) in enumerate(calculation_steps(problem["solution"])):
            stated = extract_number(result)
            try:
                value, ops = evaluate(expression)
            except ValueError:
                continue
            if stated is None or not ops or not set(ops) <= allowed_ops:
                continue
            if single_op and len(ops) != 1:
                continue
            if verified and not numbers_match(value, stated):
                continue
            if per_question is not None and kept >= int(per_question):
                break
            kept += 1
            out.append(Instance(id=f"{i}-{k}", data={
                "question": f"Calculate {expression}.",
                "answer": format_number(stated),
                "solution": f"{expression}={result}",
                "expression": expression,
                "operators": "".join(ops),
                "source_question": problem["question"],
            }))
    return out
