"""Readable views of trajectories: a self-contained HTML page (``trajectories.html``) and Markdown.

Each trajectory shows its id, reward, finish reason, turns, tool calls and error, then the conversation with
one block per message (system, user, assistant, tool) with its images (screenshots: :mod:`skyrl_core.multimodal`),
and the token counts of each LLM call.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any, Sequence

from skyrl_core.multimodal import part_png, png_size
from skyrl_core.transitions import Trajectory

_CSS = """
body{font-family:system-ui,sans-serif;margin:2em;max-width:70em;color:#222}
h1{font-size:1.4em} h2{font-size:1.1em;margin-top:2em;border-top:2px solid #ccc;padding-top:1em}
.meta{color:#555;font-size:.9em} .ok{color:#17702a;font-weight:bold} .bad{color:#a0201c;font-weight:bold}
.msg{margin:.5em 0;padding:.5em .8em;border-radius:6px;white-space:pre-wrap;font-family:ui-monospace,monospace;
font-size:.85em;overflow-x:auto}
.system{background:#f2f2f2} .user{background:#e8f0fe} .assistant{background:#fff7e0} .tool{background:#e9f7ec}
.role{font-weight:bold;font-family:system-ui,sans-serif;display:block;margin-bottom:.2em}
.reset{border-left:4px solid #a0201c}
.shot{display:block;max-width:100%;height:auto;border:1px solid #bbb;margin-top:.4em}
table{border-collapse:collapse;font-size:.85em} td,th{border:1px solid #ddd;padding:.2em .5em}
"""


def _shown_images(message: dict) -> list[tuple[str, int, int]]:
    """(data URL, width, height) of each valid image part of ``message``; invalid parts are left out."""
    shown = []
    for part in message.get("images") or []:
        try:
            width, height = png_size(part_png(part))
        except ValueError:
            continue
        shown.append((part["image_url"]["url"], width, height))
    return shown


def images_html(message: dict) -> str:
    """``<img>`` tags for a message's image parts (the HTML trajectory view); empty when there are none."""
    return "".join(f"<img class='shot' src='{html.escape(url, quote=True)}' width='{w}' height='{h}' "
                   f"alt='screenshot {w}x{h}'>" for url, w, h in _shown_images(message))


def images_markdown(message: dict) -> list[str]:
    """Markdown image lines (``![screenshot WxH](data:...)``) for a message's image parts."""
    return [f"![screenshot {w}x{h}]({url})" for url, w, h in _shown_images(message)]


def pick(trajectories: Sequence[Trajectory], limit: int) -> list[Trajectory]:
    """Up to ``limit`` trajectories: rewarded and unrewarded ones alternating, so both kinds are shown."""
    good = [t for t in trajectories if t.reward > 0]
    bad = [t for t in trajectories if t.reward <= 0]
    out: list[Trajectory] = []
    while len(out) < limit and (good or bad):
        for pool in (good, bad):
            if pool and len(out) < limit:
                out.append(pool.pop(0))
    return out


def _content(message: dict) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


def trajectory_html(traj: Trajectory) -> str:
    """One trajectory as an HTML fragment."""
    e = html.escape
    verdict = "ok" if traj.reward > 0 else "bad"
    calls = ", ".join(f"{k}×{v}" for k, v in sorted(traj.tool_calls.items())) or "none"
    parts = [f"<h2 id='{e(traj.id)}'>{e(traj.id)}</h2>",
             f"<div class='meta'>reward <span class='{verdict}'>{traj.reward:g}</span> · finish reason "
             f"<b>{e(str(traj.finish_reason))}</b>{' (masked)' if traj.masked else ''} · turns {traj.turns} · "
             f"tool calls {e(calls)} · answer {e(repr(traj.answer))}</div>"]
    if traj.error:
        parts.append(f"<div class='meta bad'>error: {e(traj.error)}</div>")
    for m in traj.messages:
        role = str(m.get("role", "?"))
        cls = role if role in ("system", "user", "assistant", "tool") else "user"
        reset = " reset" if m.get("context_reset") else ""
        label = role + (" — context reset" if reset else "")
        parts.append(f"<div class='msg {cls}{reset}'><span class='role'>{e(label)}</span>{e(_content(m))}"
                     f"{images_html(m)}</div>")
    if traj.transitions:
        rows = "".join(f"<tr><td>{i}</td><td>{len(t.input_ids)}</td><td>{len(t.output_ids)}</td>"
                       f"<td>{e(t.finish_reason)}</td><td>{t.latency_s:.2f}</td>"
                       f"<td>{'yes' if t.new_context else ''}</td></tr>" for i, t in enumerate(traj.transitions))
        parts.append("<details><summary>LLM calls</summary><table><tr><th>#</th><th>prompt tokens</th>"
                     "<th>generated tokens</th><th>finish</th><th>seconds</th><th>new context</th></tr>"
                     f"{rows}</table></details>")
    return "\n".join(parts)


def write_html(trajectories: Sequence[Trajectory], path: str | Path, limit: int = 8,
               title: str = "skyrl trajectories", metrics: dict[str, Any] | None = None) -> Path:
    """Write a self-contained HTML page with up to ``limit`` trajectories (see :func:`pick`). Returns the path."""
    shown = pick(trajectories, limit)
    summary = ""
    if metrics:
        keys = [k for k in ("pass@1", "reward_mean", "mean_turns", "n_trajectories", "wall_s") if k in metrics]
        summary = "<p class='meta'>" + " · ".join(f"{k} {metrics[k]:.3g}" if isinstance(metrics[k], float)
                                                 else f"{k} {metrics[k]}" for k in keys) + "</p>"
    index = "".join(f"<li><a href='#{html.escape(t.id)}'>{html.escape(t.id)}</a> — reward {t.reward:g}, "
                    f"{html.escape(str(t.finish_reason))}</li>" for t in shown)
    body = "\n".join(trajectory_html(t) for t in shown)
    page = (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{_CSS}</style></head><body><h1>{html.escape(title)}</h1>{summary}"
            f"<p class='meta'>{len(shown)} of {len(trajectories)} trajectories</p><ul>{index}</ul>{body}"
            f"</body></html>\n")
    path = Path(path)
    path.write_text(page, encoding="utf-8")
    return path


def trajectory_markdown(traj: Trajectory) -> str:
    """One trajectory as Markdown (for terminals, issues and docs)."""
    calls = ", ".join(f"{k}×{v}" for k, v in sorted(traj.tool_calls.items())) or "none"
    lines = [f"### {traj.id}", "",
             f"reward {traj.reward:g} · finish reason `{traj.finish_reason}`{' (masked)' if traj.masked else ''}"
             f" · turns {traj.turns} · tool calls {calls} · answer `{traj.answer!r}`", ""]
    if traj.error:
        lines += [f"error: {traj.error}", ""]
    for m in traj.messages:
        text = _content(m).replace("```", "ʼʼʼ")
        lines += [f"**{m.get('role', '?')}**{' (context reset)' if m.get('context_reset') else ''}", "", "```",
                  text, "```", ""] + [line for img in images_markdown(m) for line in (img, "")]
    return "\n".join(lines)
