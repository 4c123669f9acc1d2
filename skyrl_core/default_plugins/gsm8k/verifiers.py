"""GSM8K verifier ``gsm8k_answer``: the trajectory's final number against the reference answer."""

from __future__ import annotations

from typing import Any

from skyrl_core.tasks import Instance, VerifierResult

from .dataset import extract_number, format_number, numbers_match


def _last_assistant_text(messages: list[dict]) -> str:
    for message in reversed(messages or []):
        if message.get("role") == "assistant":
            content = message.get("content") or ""
            if isinstance(content, list):
                content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
            if content.strip():
                return content
    return ""


def check_answer(trajectory: Any, reference: Any) -> VerifierResult:
    """Compare the trajectory's final number with ``reference``.

    The answer is ``trajectory.answer`` (set by the finish tool); when that is empty or has no number, the last
    number in the final assistant message. Reward 1.0 when equal within ``REL_TOL`` (relative), else 0.0; a
    reference without a number is *unverifiable* (docs/runtimes.md, "Verifier outcomes").
    """
    source = "finish"
    parsed = extract_number(getattr(trajectory, "answer", None))
    if parsed is None:
        source = "message"
        parsed = extract_number(_last_assistant_text(getattr(trajectory, "messages", [])))
    ref = extract_number(reference)
    correct = numbers_match(parsed, ref)
    metrics = {
        "parsed_answer": None if parsed is None else format_number(parsed),
        "reference": None if ref is None else format_number(ref),
        "answer_source": source if parsed is not None else "none",
        "correct": correct,
    }
    if ref is None:  # the row's fault, not the policy's: no verdict (masked), never a 0 trained on
        return VerifierResult.unverifiable(f"the reference answer {str(reference)[:80]!r} holds no number", metrics)
    return VerifierResult(reward=1.0 if correct else 0.0, metrics=metrics)


def gsm8k_answer(trajectory: Any, runtime: Any = None, instance: Instance | None = None) -> VerifierResult:
    """Verifier ``gsm8k_answer``: reward 1.0 when the final number equals ``instance.data["answer"]``.

    Called as ``(trajectory, runtime, instance)`` (see ``skyrl_core.tasks.run_verifier``); a ToolContext in place
    of the runtime works too (its ``instance`` is used). Raises ValueError when no instance is given.
    """
    if instance is None:
        instance = getattr(runtime, "instance", None)
    if instance is None:
        raise ValueError("verifier 'gsm8k_answer' needs the task instance (its data['answer'] is the reference)")
    return check_answer(trajectory, instance.data["answer"])
