"""One source per figure (docs/benchmarks.md, "The convention"): every registered figure has its command, rows and
date, its details page holds it, every page that marks a quote of it quotes it exactly, the README's measured
figures are all registered, and withdrawn figures appear nowhere but on the page that keeps their history."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
REGISTRY = REPO / "docs" / "benchmarks.md"
MARKER = re.compile(r"<!-- figure: ([a-z0-9-]+) -->")


def pages() -> list[Path]:
    """Every page a reader sees: the README, the docs and the plugin READMEs (the docs site includes those)."""
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md")), *sorted(REPO.glob("plugins/*/README.md"))]


def registry() -> dict[str, dict[str, str]]:
    """``{id: {figure, command, rows, date, details}}`` from the registry table."""
    out = {}
    for line in REGISTRY.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 6 and re.fullmatch(r"[a-z][a-z0-9-]*", cells[0]) and cells[0] != "id":
            out[cells[0]] = dict(zip(("figure", "command", "rows", "date", "details"), cells[1:]))
    return out


def withdrawn() -> list[tuple[str, str | None]]:
    """``[(text, the only page allowed to hold it or None)]`` from the "Withdrawn figures" list."""
    section = REGISTRY.read_text().split("## Withdrawn figures", 1)[1]
    out = []
    for m in re.finditer(r"^- `([^`]+)` — .*?(?:only in `([^`]+)`|nowhere)$", section, flags=re.M):
        out.append((m.group(1), m.group(2)))
    return out


def blocks(text: str) -> list[str]:
    """Paragraphs and list items: a quote and its marker must share one."""
    return [b for b in re.split(r"\n\s*\n|\n(?=\s*(?:- |\d+\. |\| ))", text) if b.strip()]


def test_every_registered_figure_has_command_rows_date_and_a_source_that_holds_it():
    figures = registry()
    assert len(figures) >= 20
    for fid, f in figures.items():
        assert f["figure"] and f["command"] and f["rows"], fid
        assert "`" in f["command"] or f["command"].startswith("see "), f"{fid}: the command goes in backticks"
        assert re.fullmatch(r"20\d\d-\d\d-\d\d", f["date"]), f"{fid}: date {f['date']!r}"
        link = re.search(r"\]\(([^)#]+)", f["details"])
        if link:
            source = REGISTRY.parent / link.group(1)
            if source.read_text().startswith("{%"):  # an include-markdown page: the plugin README it includes
                source = (source.parent / re.search(r'include-markdown "([^"]+)"', source.read_text()).group(1))
            assert f["figure"].strip("`") in source.read_text(), f"{fid}: {source} does not hold {f['figure']!r}"


def test_every_marked_quote_is_the_registered_figure():
    figures = registry()
    for page in pages():
        for block in blocks(page.read_text()):
            for m in MARKER.finditer(block):
                fid = m.group(1)
                assert fid in figures, f"{page.relative_to(REPO)}: unknown figure id {fid!r}"
                before = block[:m.start()]
                assert figures[fid]["figure"].strip("`") in before, (
                    f"{page.relative_to(REPO)} quotes figure {fid!r} as something other than its registered "
                    f"{figures[fid]['figure']!r}: {before[-160:]!r}")


def test_every_measured_item_of_the_readme_is_registered():
    text = (REPO / "README.md").read_text()
    measured = text.split("## Measured so far", 1)[1].split("\n## ", 1)[0]
    items = re.split(r"\n(?=- \*\*)", measured)[1:]
    assert len(items) >= 10
    unmarked = [item.split("\n", 1)[0][:70] for item in items if not MARKER.search(item)]
    assert not unmarked, f"README items quoting figures without a registered one: {unmarked}"


@pytest.mark.parametrize("text,allowed", withdrawn())
def test_a_withdrawn_figure_appears_only_where_its_history_is_kept(text, allowed):
    holders = [str(p.relative_to(REPO)) for p in pages() if p != REGISTRY and text in p.read_text()]
    assert holders == ([allowed] if allowed and allowed in holders else []), (
        f"withdrawn figure {text!r} still quoted in {holders}")


def test_the_withdrawn_list_is_read():
    assert {t for t, _ in withdrawn()} >= {"44 attacks", "about ten minutes", "0.22 -> 0.95"}


def test_the_readme_says_what_never_ran():
    text = (REPO / "README.md").read_text()
    never = text.split("**What never ran here.**", 1)[1].split("\n\n", 1)[0]
    for name in ("VeRL", "SkyRL-train", "GPU", "Serper", "Jina", "Tinker", "OSWorld VM"):
        assert name in never, name


def test_the_quickstart_is_quoted_both_ways_and_localisation_from_held_out_rows():
    """Pass@1 at the training temperature and greedy, side by side; the localisation headline is the held-out
    row set's, and the registry says the rows were never used for tuning."""
    text = (REPO / "README.md").read_text()
    quickstart = text.split("- **The quickstart**", 1)[1].split("\n- **", 1)[0]
    assert "<!-- figure: quickstart-t1 -->" in quickstart and "<!-- figure: quickstart-greedy -->" in quickstart
    figures = registry()
    assert "temperature 1" in figures["quickstart-t1"]["rows"] and "greedy" in figures["quickstart-greedy"]["rows"]
    localisation = text.split("- **Localisation**", 1)[1].split("\n- **", 1)[0]
    assert "<!-- figure: localize-heldout -->" in localisation and "never used for tuning" in localisation
    assert "never looked at while tuning" in figures["localize-heldout"]["rows"]
