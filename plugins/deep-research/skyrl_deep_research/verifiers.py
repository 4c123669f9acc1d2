"""Verifiers: exact match and token F1 normalised as in the official HotpotQA evaluation script
(hotpot_evaluate_v1.py: lower case, punctuation and the articles a/an/the removed, whitespace collapsed; F1 is 0
when either side is yes/no/noanswer and they differ), and an LLM-as-judge.

Every verifier also records the web runtime's counters (cache hits/misses/saved seconds, blocked attempts,
provider errors) in the trajectory's metrics.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from typing import Any

from skyrl_core import VerifierResult

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = set(string.punctuation)


def normalize_answer(text: str) -> str:
    """HotpotQA's answer normalisation."""
    text = str(text).lower()
    text = "".join(ch for ch in text if ch not in _PUNCT)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def exact_match(prediction: str, gold: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(gold))


def f1_score(prediction: str, gold: str) -> float:
    """Token F1 of the normalised strings (HotpotQA's ``f1_score``)."""
    pred, ref = normalize_answer(prediction), normalize_answer(gold)
    special = {"yes", "no", "noanswer"}
    if (pred in special or ref in special) and pred != ref:
        return 0.0
    pred_tokens, ref_tokens = pred.split(), ref.split()
    common = Counter(pred_tokens) & Counter(ref_tokens)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred_tokens), same / len(ref_tokens)
    return 2 * precision * recall / (precision + recall)


def web_metrics(runtime: Any) -> dict[str, float]:
    metrics = getattr(runtime, "trajectory_metrics", None)
    return metrics() if callable(metrics) else {}


def answer_scores(trajectory: Any, instance: Any) -> dict[str, float]:
    """``em``, ``f1`` (best over the accepted answers) and ``answered`` for the trajectory's final answer."""
    golds = instance.data.get("answers") or []
    answer = trajectory.answer
    if answer is None or not golds:
        return {"em": 0.0, "f1": 0.0, "answered": 0.0}
    answer = str(answer)
    return {"em": max(exact_match(answer, g) for g in golds), "f1": max(f1_score(answer, g) for g in golds),
            "answered": 1.0}


def qa_exact_match(trajectory: Any, runtime: Any, instance: Any) -> VerifierResult:
    """Reward 1 when the normalised answer equals a gold answer; metrics ``em``, ``f1``, web counters."""
    scores = answer_scores(trajectory, instance)
    return VerifierResult(reward=scores["em"], metrics={**scores, **web_metrics(runtime)})


def qa_f1(trajectory: Any, runtime: Any, instance: Any) -> VerifierResult:
    """Reward = token F1 against the best gold answer; metrics as ``qa_exact_match``."""
    scores = answer_scores(trajectory, instance)
    return VerifierResult(reward=scores["f1"], metrics={**scores, **web_metrics(runtime)})


# -- LLM as judge ----------------------------------------------------------------------------------------

DEFAULT_JUDGE_PROMPT = (
    "You grade answers to questions. Question: {question}\nReference answer: {gold}\nCandidate answer: {answer}\n\n"
    "Is the candidate answer correct, meaning it states the same fact as the reference (wording may differ)? "
    "Reply with exactly one line: VERDICT: CORRECT or VERDICT: INCORRECT")
_VERDICT = re.compile(r"^\s*VERDICT:\s*(CORRECT|INCORRECT)\s*$", re.IGNORECASE)


class JudgeError(Exception):
    """The judge could not give a verdict (engine failure or a reply that is not exactly one verdict line), or
    is not configured. :func:`llm_judge` turns a failed verdict into *unverifiable* or *tampered* (a control
    question decides); only a missing setting is raised out of the verifier."""


def parse_verdict(reply: str) -> bool:
    """True for CORRECT, False for INCORRECT. The reply must hold exactly one line ``VERDICT: CORRECT`` or
    ``VERDICT: INCORRECT`` (case-insensitive) and no other line mentioning a verdict; anything else raises
    JudgeError quoting the reply."""
    lines = [ln for ln in str(reply).splitlines() if ln.strip()]
    verdicts = [m.group(1).upper() for ln in lines if (m := _VERDICT.match(ln))]
    mentions = [ln for ln in lines if "verdict" in ln.lower()]
    if len(verdicts) != 1 or len(mentions) != 1:
        raise JudgeError(f"judge reply is not exactly one 'VERDICT: CORRECT|INCORRECT' line: {reply[:200]!r}")
    return verdicts[0] == "CORRECT"


def judge_prompt(template: str, question: str, gold: str, answer: str) -> str:
    """The template filled in; raises JudgeError naming a placeholder that is not {question}/{gold}/{answer}."""
    try:
        return template.format(question=question, gold=gold, answer=answer)
    except (KeyError, IndexError, ValueError) as exc:
        raise JudgeError(f"judge_prompt template is invalid ({type(exc).__name__}: {exc}); it may use "
                         "{question}, {gold} and {answer}") from None


async def llm_judge(trajectory: Any, runtime: Any, instance: Any) -> VerifierResult:
    """Reward 1 when the judge engine (runtime option ``judge: {model, engine}``) says CORRECT. The prompt is
    runtime option ``judge_prompt`` (placeholders {question}, {gold}, {answer}). A trajectory without an answer
    scores 0 without asking; a missing judge setting raises JudgeError. When the judge fails or its reply does not
    parse, a control question (the gold answer as the candidate) decides the blame: the judge answers it, so the
    agent's answer broke the judge (*tampered*, reward 0), or it does not (*unverifiable*: masked, never a 0
    trained on; docs/runtimes.md, "Verifier outcomes"). Metrics add ``em``/``f1``, ``judge_correct``."""
    from .summary import SideEngineError, complete, side_engine

    scores = answer_scores(trajectory, instance)
    metrics = {**scores, **web_metrics(runtime)}
    if not scores["answered"]:
        return VerifierResult(reward=0.0, metrics={**metrics, "judge_correct": 0.0})
    options = getattr(runtime, "options", {}) or {}
    if "judge" not in options:
        raise JudgeError("verifier llm_judge needs runtime option 'judge: {model: ..., engine: {type: ...}}'")
    try:
        engine = await side_engine(options["judge"], None, "judge")
    except SideEngineError as exc:  # a configuration error: loud
        raise JudgeError(str(exc)) from None
    template = options.get("judge_prompt", DEFAULT_JUDGE_PROMPT)
    gold = " | ".join(instance.data.get("answers") or [])

    async def verdict(candidate: str) -> bool:
        prompt = judge_prompt(template, instance.data["question"], gold, candidate)
        try:
            reply = await complete(engine, [{"role": "user", "content": prompt}], max_tokens=32)
        except Exception as exc:
            raise JudgeError(f"judge engine failed: {type(exc).__name__}: {exc}") from None
        return parse_verdict(reply)

    try:
        correct = await verdict(str(trajectory.answer))
    except JudgeError as exc:
        try:
            await verdict(gold)
        except JudgeError as control:
            return VerifierResult.unverifiable(f"{exc}; the control question (the gold answer) failed too: {control}",
                                               {**metrics, "judge_error": str(exc)})
        return VerifierResult.tampered(f"{exc}; the judge answered the control question (the gold answer)",
                                       {**metrics, "judge_correct": 0.0, "judge_error": str(exc)})
    return VerifierResult(reward=float(correct), metrics={**metrics, "judge_correct": float(correct)})
