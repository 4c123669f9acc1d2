"""The index's bounds measure the input, not the machine (#37): a parse that a busy machine slows down keeps its
file's symbols, and a file the CPU backstop stopped is parsed again at once and on the next refresh — never cached
without symbols. The machine's load is stood in for by a CPU clock that jumps (a stall that the parsing thread
is billed for); the hostile-file attack tests are in test_index_bounds.py."""

from __future__ import annotations

import time

import pytest

from skyrl_swe import index as index_mod
from skyrl_swe.index import CONTENT_CACHE, PARSE_BACKSTOP_S, CodeIndex, parse_python

CODE = "".join(f"class Model{n}:\n    def save_{n}(self, x):\n        return helper(x)\n\n" for n in range(300))


class JumpingClock:
    """``time`` for the index module, whose ``thread_time`` jumps by ``jump`` seconds after the first reading of
    each of the next ``parses`` parses (a parse reads the clock first when it sets its deadline)."""

    def __init__(self, jump: float, parses: int) -> None:
        self.jump, self.parses, self.calls, self.offset = jump, parses, 0, 0.0

    def __getattr__(self, name):
        return getattr(time, name)

    def thread_time(self) -> float:
        self.calls += 1
        return time.thread_time() + self.offset

    def stall(self) -> None:
        if self.parses > 0:
            self.parses -= 1
            self.offset += self.jump


@pytest.fixture
def project(tmp_path, monkeypatch):
    CONTENT_CACHE.data.clear()
    (tmp_path / "models.py").write_text(CODE)

    def install(clock: JumpingClock):
        monkeypatch.setattr(index_mod, "time", clock)
        real = index_mod._Budget.__init__

        def init(self, seconds, *rest):  # the stall lands inside the parse, after its deadline is set
            real(self, seconds, *rest)
            clock.stall()

        monkeypatch.setattr(index_mod._Budget, "__init__", init)
        return CodeIndex(tmp_path, workers=1)

    yield install
    CONTENT_CACHE.data.clear()


def _refs(index):
    return sorted(s.qualname for s in index.files["models.py"].symbols)


def test_a_real_file_parsed_during_a_stall_keeps_its_symbols(project):
    """sympy's polytools.py parses in 0.03-0.15 s alone; on a loaded machine it was billed over the old 1 s
    budget and lost its definitions. A 3 s stall now changes nothing."""
    index = project(JumpingClock(jump=3.0, parses=1))
    stats = index.refresh()
    assert "skipped" not in stats
    assert len(_refs(index)) == 600 and "Model299.save_299" in _refs(index)


def test_a_stall_past_the_backstop_is_parsed_again_at_once(project):
    index = project(JumpingClock(jump=PARSE_BACKSTOP_S + 5, parses=1))
    stats = index.refresh()
    assert "skipped" not in stats and len(_refs(index)) == 600


def test_a_dropped_file_is_retried_on_the_next_refresh_never_cached_empty(project):
    clock = JumpingClock(jump=PARSE_BACKSTOP_S + 5, parses=2)  # both tries in this refresh are stalled
    index = project(clock)
    stats = index.refresh()
    assert "CPU time" in stats["skipped"]["models.py"] and _refs(index) == []
    assert len(CONTENT_CACHE.data) == 0  # nothing cached for these bytes
    stats = index.refresh()  # the file did not change; the machine calmed down
    assert "skipped" not in stats and len(_refs(index)) == 600
    assert len(CONTENT_CACHE.data) == 1


def test_the_step_budget_is_a_property_of_the_input():
    """The same bytes get the same verdict whatever the clock says: the steps bound counts parse operations."""
    hostile = b"x = " + b"[" * 200 + b"1" + b"]" * 200 + b"\n"
    first = parse_python(CODE.encode())
    assert first.skipped == "" and len(first.symbols) == 600 and not first.transient
    assert parse_python(hostile).skipped == parse_python(hostile).skipped
