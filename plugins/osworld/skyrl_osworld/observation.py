"""Observations: a screenshot (PNG, one pixel per click coordinate) and an accessibility-tree text view.

The text view is read from Chromium's own accessibility tree (CDP ``Accessibility.getFullAXTree``), each node
placed with its layout box from one ``DOMSnapshot.captureSnapshot`` call, so a text-only model sees every
visible control with the screen position to click::

    [3] button "Submit" @(52,133) 45x21
    [4] textbox "" value="ab" focused @(80,96) 120x19

``@(x,y)`` is the centre of the element's box in screen pixels (the viewport origin is the screenshot's
top-left), ``WxH`` its size. :func:`fit_to_budget` cuts the view to a token budget with the engine's tokenizer.
"""

from __future__ import annotations

from typing import Any

import attrs

# roles that carry no meaning of their own: their children are shown, they are not
_SKIP_ROLES = {"generic", "none", "InlineTextBox", "LineBreak", "RootWebArea", "WebArea", "paragraph", "Section",
               "LayoutTable", "LayoutTableRow", "LayoutTableCell", "ListMarker", "group"}
_STATES = ("checked", "selected", "focused", "expanded", "disabled", "pressed")


@attrs.define
class Observation:
    """What the agent sees after an action. ``screenshot`` PNG bytes (``width`` x ``height`` pixels, equal to
    click coordinates) or None; ``text`` the accessibility-tree view; ``title``/``url`` of the page."""

    text: str
    screenshot: bytes | None = None
    width: int = 0
    height: int = 0
    url: str = ""
    title: str = ""


def layout_boxes(snapshot: dict) -> dict[int, tuple[float, float, float, float]]:
    """backendNodeId -> (x, y, width, height) in CSS pixels from a DOMSnapshot.captureSnapshot result."""
    boxes: dict[int, tuple[float, float, float, float]] = {}
    for doc in snapshot.get("documents", [])[:1]:  # the top document; MiniWoB pages have no frames
        backend = doc["nodes"].get("backendNodeId", [])
        layout = doc["layout"]
        for node_index, bounds in zip(layout["nodeIndex"], layout["bounds"]):
            if node_index < len(backend) and len(bounds) == 4:
                boxes[backend[node_index]] = tuple(float(b) for b in bounds)
    return boxes


def _value(field: Any) -> Any:
    return field.get("value") if isinstance(field, dict) else None


def ax_text(nodes: list[dict], boxes: dict[int, tuple[float, float, float, float]], width: int,
            height: int, offset: tuple[int, int] = (0, 0)) -> str:
    """The indented text view of a CDP full AX tree ``nodes``, keeping nodes whose box meets the viewport
    (``width`` x ``height`` pixels). Lines are ``[n] role "name" [value=".."] [states] @(cx,cy) WxH``; centres
    are shifted by ``offset`` (the viewport's top-left on the screen, where the screen is more than the page)."""
    by_id = {n["nodeId"]: n for n in nodes}
    children = {n["nodeId"]: n.get("childIds", []) for n in nodes}
    roots = [n for n in nodes if not n.get("parentId")] or nodes[:1]
    lines: list[str] = []
    seen: set[str] = set()

    def visit(node_id: str, depth: int, parent_name: str = "") -> None:
        if node_id in seen or node_id not in by_id:
            return
        seen.add(node_id)
        node = by_id[node_id]
        role = _value(node.get("role")) or ""
        name = (_value(node.get("name")) or "").strip()
        shown = False
        # a control's own label text repeats its name: show the control only
        repeat = role == "StaticText" and name == parent_name
        if not node.get("ignored") and role not in _SKIP_ROLES and (name or role != "StaticText") and not repeat:
            box = boxes.get(node.get("backendDOMNodeId"))
            if box and box[2] > 0 and box[3] > 0 and box[0] < width and box[1] < height \
                    and box[0] + box[2] > 0 and box[1] + box[3] > 0:
                parts = [f"[{len(lines) + 1}]", "text" if role == "StaticText" else role]
                parts.append(f'"{name[:120]}"')
                value = _value(node.get("value"))
                if value not in (None, ""):
                    parts.append(f'value="{str(value)[:120]}"')
                for prop in node.get("properties", []):
                    if prop.get("name") in _STATES:
                        v = _value(prop.get("value"))
                        if v not in (False, None, "false"):
                            parts.append(prop["name"] if v in (True, "true") else f"{prop['name']}={v}")
                cx, cy = round(box[0] + box[2] / 2) + offset[0], round(box[1] + box[3] / 2) + offset[1]
                parts.append(f"@({cx},{cy}) {round(box[2])}x{round(box[3])}")
                lines.append("  " * depth + " ".join(parts))
                shown = True
        if role == "StaticText":
            return  # its InlineTextBox children repeat it
        for child in children.get(node_id, []):
            visit(child, depth + (1 if shown else 0), name if shown else parent_name)

    for root in roots:
        visit(root["nodeId"], 0)
    return "\n".join(lines)


def fit_to_budget(text: str, budget_tokens: int, tokenizer: Any = None) -> tuple[str, bool]:
    """Keep whole lines of ``text`` while they fit ``budget_tokens`` tokens (counted with ``tokenizer``, or
    as characters / 4 without one). Returns (text, cut); a cut text ends with a note of the lines left out."""
    lines = text.splitlines()

    def count(s: str) -> int:
        if tokenizer is None:
            return len(s) // 4 + 1
        return len(tokenizer(s, add_special_tokens=False)["input_ids"]) + 1

    if count(text) <= budget_tokens:
        return text, False
    kept: list[str] = []
    used = 0
    for line in lines:
        n = count(line)
        if used + n > budget_tokens - 16:
            break
        kept.append(line)
        used += n
    kept.append(f"[... {len(lines) - len(kept)} more elements not shown: the view is cut to "
                f"{budget_tokens} tokens]")
    return "\n".join(kept), True
