"""Re-tokenisation drift (``agent.drift_check``): what would change if the agent loop re-encoded a conversation
instead of extending it by token ids. The built-in chat format's ``check_drift`` (the chat format contract's
optional member, which the agent loop calls at the end of a trajectory) is :func:`check_drift`; the recording
gateway compares a harness's re-sent conversation with :func:`token_drift` too."""

from __future__ import annotations

import difflib
from typing import Any, Sequence

import attrs

from skyrl_core.multimodal import has_images


@attrs.define
class Drift:
    """Where re-tokenising a conversation differs from its recorded ids: ``tokens`` differing (the larger side
    of each differing span; 0 when the two are equal), ``spans`` (runs of differences), ``first`` (index of the
    first differing token in the recorded ids; -1 when equal), ``recorded``/``rendered`` (the ids of the first
    differing span on each side)."""

    tokens: int = 0
    spans: int = 0
    first: int = -1
    recorded: list[int] = attrs.Factory(list)
    rendered: list[int] = attrs.Factory(list)


MAX_DIFF_SPAN = 4096  # longer differing middles are counted as one span, not diffed token by token


def token_drift(recorded: Sequence[int], rendered: Sequence[int]) -> Drift:
    """Compare ``recorded`` ids with the ``rendered`` ids of the same conversation. O(n) for the common prefix
    and suffix; the differing middle is diffed (``difflib``) when it is at most :data:`MAX_DIFF_SPAN` tokens."""
    a, b = list(recorded), list(rendered)
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    if i == len(a) == len(b):
        return Drift()
    j = 0
    while j < n - i and a[len(a) - 1 - j] == b[len(b) - 1 - j]:
        j += 1
    mid_a, mid_b = a[i:len(a) - j], b[i:len(b) - j]
    if len(mid_a) + len(mid_b) > MAX_DIFF_SPAN:
        return Drift(max(len(mid_a), len(mid_b)), 1, i, mid_a[:16], mid_b[:16])
    ops = [op for op in difflib.SequenceMatcher(None, mid_a, mid_b, autojunk=False).get_opcodes() if op[0] != "equal"]
    first = ops[0]
    return Drift(sum(max(i2 - i1, j2 - j1) for _, i1, i2, j1, j2 in ops), len(ops), i + first[1],
                 mid_a[first[1]:first[2]], mid_b[first[3]:first[4]])


def check_drift(trajectory: Any, chat: Any, messages: list[dict], schemas: list[dict]) -> None:
    """Re-tokenisation drift check: render ``messages`` (the live context) up to the last assistant message
    with the chat template, tokenise, and compare with the recorded ``input_ids`` of the trajectory's last
    transition. Sets ``metrics["retok_drift"]`` (bool), ``retok_drift_tokens`` and ``retok_drift_spans``
    (:class:`Drift`) and, when they differ, ``retok_drift_where``: the token index, the turn
    it lies in and the text of the first difference on each side. Read-only: the transitions (what the trainer
    trains on) are never replaced by the re-rendered ids. One render of the context: O(conversation)."""
    if not trajectory.transitions or has_images(messages):
        return
    last = trajectory.transitions[-1]
    at = max((i for i, m in enumerate(messages) if m.get("role") == "assistant"), default=None)
    if at is None:
        return
    try:
        rendered = chat.render_ids(messages[:at], schemas)
    except Exception as exc:  # a template that cannot re-render what it rendered before: say so, never raise
        trajectory.metrics["retok_drift_where"] = f"re-render failed: {type(exc).__name__}: {exc}"[:300]
        return
    drift = token_drift(last.input_ids, rendered)
    trajectory.metrics["retok_drift"] = drift.tokens > 0
    trajectory.metrics["retok_drift_tokens"] = drift.tokens
    trajectory.metrics["retok_drift_spans"] = drift.spans
    if drift.tokens:
        start = _turn_of(trajectory.transitions, drift.first)
        end = _turn_of(trajectory.transitions, drift.first + max(len(drift.recorded), 1) - 1)
        trajectory.metrics["retok_drift_where"] = (
            f"token {drift.first} ({start if start == end else f'across {start} and {end}'}): recorded "
            f"{len(drift.recorded)} token(s) {chat.tokenizer.decode(drift.recorded)!r}, re-rendered as "
            f"{len(drift.rendered)} token(s) {chat.tokenizer.decode(drift.rendered)!r}")


def _turn_of(transitions: list, index: int) -> str:
    """Which part of the last datum's prompt token ``index`` lies in: a turn's generation, the observations
    after it, or the initial prompt (turns count from 1)."""
    start = len(transitions) - 1
    while start > 0 and not transitions[start].new_context:
        start -= 1
    datum = transitions[start:]
    if index < len(datum[0].input_ids):
        return "the initial prompt"
    for k, t in enumerate(datum):
        end = len(t.input_ids) + len(t.output_ids)
        if len(t.input_ids) <= index < end:
            return f"the generation of turn {start + k + 1}"
        if k + 1 < len(datum) and end <= index < len(datum[k + 1].input_ids):
            return f"the observations after turn {start + k + 1}"
    return "the last prompt"
