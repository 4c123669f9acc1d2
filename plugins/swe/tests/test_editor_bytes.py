"""The editor touches only the edited region's bytes: line endings of other lines (mixed CRLF/LF files), tabs,
encodings (UTF-8 with BOM, Latin-1, UTF-16) and a present or missing final newline stay byte for byte."""

from __future__ import annotations

import codecs

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from skyrl_swe.editor import Editor, EditorError

# A Windows-edited file in a Unix repository: one function pasted with CRLF, the rest LF, no final newline.
MIXED = (b"import os\n"
         b"\n"
         b"def read(path):\r\n"
         b"\twith open(path) as fh:\r\n"
         b"\t\treturn fh.read()\r\n"
         b"\n"
         b"def write(path, text):\n"
         b"    open(path, 'w').write(text)")


def test_one_line_edit_of_a_mixed_ending_file_changes_only_that_line(tmp_path):
    (tmp_path / "io_utils.py").write_bytes(MIXED)
    ed = Editor(tmp_path)
    ed.str_replace("io_utils.py", "\t\treturn fh.read()\n", "\t\treturn fh.read().strip()\n")
    assert (tmp_path / "io_utils.py").read_bytes() == MIXED.replace(b"fh.read()\r\n", b"fh.read().strip()\r\n")
    ed.str_replace("io_utils.py", "open(path, 'w')", "open(path, 'w', encoding='utf-8')")
    after = (tmp_path / "io_utils.py").read_bytes()
    assert after.endswith(b"encoding='utf-8').write(text)")  # still no final newline
    assert after.count(b"\r\n") == 3 and after.count(b"\n") == 7
    assert "mixed CRLF and LF" in ed.view("io_utils.py")


def test_multi_line_replacement_takes_the_ending_of_the_region_it_replaces(tmp_path):
    (tmp_path / "m.py").write_bytes(MIXED)
    ed = Editor(tmp_path)
    ed.str_replace("m.py", "def write(path, text):\n", "def write(path, text):\n    \"\"\"Write.\"\"\"\n")
    ed.str_replace("m.py", "def read(path):\n", "def read(path):\n\t\"\"\"Read.\"\"\"\n")
    data = (tmp_path / "m.py").read_bytes()
    assert b'def read(path):\r\n\t"""Read."""\r\n\twith' in data
    assert b'def write(path, text):\n    """Write."""\n    open' in data


def test_insert_keeps_the_neighbouring_ending_and_the_missing_final_newline(tmp_path):
    (tmp_path / "m.py").write_bytes(MIXED)
    ed = Editor(tmp_path)
    ed.insert("m.py", 4, "\t# opened read-only")
    ed.insert("m.py", 9, "# end")
    data = (tmp_path / "m.py").read_bytes()
    assert b"\twith open(path) as fh:\r\n\t# opened read-only\r\n\t\treturn" in data
    assert data.endswith(b"write(text)\n# end")
    ed.undo_edit("m.py")
    ed.undo_edit("m.py")
    assert (tmp_path / "m.py").read_bytes() == MIXED


@pytest.mark.parametrize("encoding,bom", [("utf-8", codecs.BOM_UTF8), ("latin-1", b""),
                                          ("utf-16-le", codecs.BOM_UTF16_LE)])
def test_encodings_and_bom_survive(tmp_path, encoding, bom):
    text = "# café\r\nnaïve = 1\nx = 2\r\n"
    (tmp_path / "e.py").write_bytes(bom + text.encode(encoding))
    ed = Editor(tmp_path)
    ed.str_replace("e.py", "x = 2", "x = 3")
    assert (tmp_path / "e.py").read_bytes() == bom + text.replace("x = 2", "x = 3").encode(encoding)


def test_create_writes_file_text_exactly(tmp_path):
    ed = Editor(tmp_path)
    ed.create("new.bat", "@echo off\r\necho hi\nexit")
    assert (tmp_path / "new.bat").read_bytes() == b"@echo off\r\necho hi\nexit"


def test_characters_the_encoding_cannot_hold_are_refused_without_writing(tmp_path):
    (tmp_path / "l.txt").write_bytes("caf\xe9\n".encode("latin-1") + b"\xff\n")
    ed = Editor(tmp_path)
    with pytest.raises(EditorError, match="cannot hold"):
        ed.str_replace("l.txt", "caf", "\u2603")
    assert (tmp_path / "l.txt").read_bytes() == "caf\xe9\n".encode("latin-1") + b"\xff\n"


lines = st.lists(st.tuples(st.text(alphabet="ab \t=()é", min_size=1, max_size=8),
                           st.sampled_from(["\n", "\r\n"])), min_size=2, max_size=8)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=lines, final=st.booleans(), data=st.data())
def test_any_single_line_edit_leaves_every_other_byte(tmp_path, rows, final, data):
    rows = [(f"L{i}{body}", end) for i, (body, end) in enumerate(rows)]  # each line unique
    raw = "".join(body + end for body, end in rows)
    if not final:
        raw = raw[:-len(rows[-1][1])]
    path = tmp_path / "f.txt"
    path.write_bytes(raw.encode("utf-8"))
    k = data.draw(st.integers(0, len(rows) - 1), label="line")
    body, end = rows[k]
    Editor(tmp_path).str_replace("f.txt", body, body + "X")
    expected = "".join(b + ("X" if i == k else "") + e for i, (b, e) in enumerate(rows))
    if not final:
        expected = expected[:-len(rows[-1][1])]
    assert path.read_bytes() == expected.encode("utf-8")
