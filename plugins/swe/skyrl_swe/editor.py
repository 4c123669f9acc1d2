"""The ``str_replace_editor`` tool: view, create, str_replace, insert and undo_edit on files in the workspace
(the editor interface of SWE-agent / OpenHands that SkyRL-Agent's SWE task uses, arXiv 2511.16108, Sec. 4.1).

Edits touch only the bytes of the edited region: the file's encoding (UTF-8, UTF-8 with BOM, UTF-16 with BOM,
else Latin-1, all decoded losslessly), every other line's ending (mixed CRLF/LF files stay mixed; the model's
strings are matched with LF and written with the ending of the region they replace), tabs and a present or
missing final newline stay byte for byte. ``create`` writes ``file_text`` exactly as given. Every failure is a
ToolResult with ``error=True`` and a message saying what would work; nothing raises into the agent loop.
"""

from __future__ import annotations

import asyncio
import bisect
import codecs
import os
from pathlib import Path
from typing import Any

import attrs

from skyrl_core import ToolContext, ToolResult

from .runtime import outside_workspace, workspace_for_tool

SNIPPET_CONTEXT = 4  # lines shown around an edit
MAX_VIEW_CHARS = 20000
MAX_TEXT_CHARS = 1_000_000  # file_text, old_str, new_str: a source file, not a data dump (the disk cap is the workspace's)
MAX_UNDO = 20
DIR_DEPTH = 2


class EditorError(Exception):
    """A user-facing editor failure; its message goes back to the model."""


@attrs.define
class FileText:
    """A decoded file. ``raw`` is its text with line endings as they are; ``text`` is the same with CRLF read
    as LF (what the model sees and matches against). Edits are spliced into ``raw`` (:meth:`splice`), so every
    byte outside the edited region — other lines' endings, tabs, a missing or present final newline, the
    BOM — is written back unchanged.

    Decoding is lossless: UTF-8 (with or without BOM) or UTF-16 with BOM where the bytes are valid, else
    Latin-1 (one character per byte)."""

    raw: str
    encoding: str = "utf-8"
    bom: bytes = b""
    text: str = attrs.field(init=False)
    _crlf_at: list[int] = attrs.field(init=False, repr=False)  # indices in ``text`` of each CRLF's LF

    def __attrs_post_init__(self) -> None:
        self.text = self.raw.replace("\r\n", "\n")
        self._crlf_at = []
        shift = 0
        at = self.raw.find("\r\n")
        while at != -1:
            self._crlf_at.append(at - shift)
            shift += 1
            at = self.raw.find("\r\n", at + 2)

    @classmethod
    def decode(cls, data: bytes) -> "FileText":
        for bom, enc in ((codecs.BOM_UTF8, "utf-8"), (codecs.BOM_UTF16_LE, "utf-16-le"),
                         (codecs.BOM_UTF16_BE, "utf-16-be")):
            if data.startswith(bom):
                try:
                    return cls(raw=data[len(bom):].decode(enc), encoding=enc, bom=bom)
                except UnicodeDecodeError:
                    break
        try:
            return cls(raw=data.decode("utf-8"), encoding="utf-8")
        except UnicodeDecodeError:
            return cls(raw=data.decode("latin-1"), encoding="latin-1")

    @property
    def crlf(self) -> bool:
        return bool(self._crlf_at)

    @property
    def mixed(self) -> bool:
        """Both CRLF and bare LF line endings occur."""
        return self.crlf and self.text.count("\n") > len(self._crlf_at)

    def raw_index(self, i: int) -> int:
        """The index in ``raw`` of index ``i`` of ``text``."""
        return i + bisect.bisect_left(self._crlf_at, i)

    def ending_near(self, i: int) -> str:
        """The line ending of the line holding ``text[i]`` (the one before it at the end of the file; the file's
        most common ending when it has no line break)."""
        nl = self.text.find("\n", i)
        if nl == -1:
            nl = self.text.rfind("\n", 0, i)
        if nl == -1:
            return "\r\n" if self.crlf else "\n"
        k = bisect.bisect_left(self._crlf_at, nl)
        return "\r\n" if k < len(self._crlf_at) and self._crlf_at[k] == nl else "\n"

    def splice(self, start: int, end: int, new: str) -> str:
        """``raw`` with ``text[start:end]`` replaced by ``new`` (LF line breaks, written with the line ending of
        the region it replaces)."""
        ending = self.ending_near(start)
        new = new.replace("\r\n", "\n")
        if ending != "\n":
            new = new.replace("\n", ending)
        return self.raw[:self.raw_index(start)] + new + self.raw[self.raw_index(end):]

    def encode(self, raw: str | None = None) -> bytes:
        raw = self.raw if raw is None else raw
        try:
            return self.bom + raw.encode(self.encoding)
        except UnicodeEncodeError as exc:
            raise EditorError(f"the new text has characters ({exc.object[exc.start:exc.end]!r}) that the file's "
                              f"encoding {self.encoding} cannot hold; use an escape or ASCII instead") from None


def _numbered(lines: list[str], first: int) -> str:
    return "\n".join(f"{n:6d}\t{line}" for n, line in enumerate(lines, start=first))


class Editor:
    """Editor operations on one workspace directory. ``history`` maps a relative path to earlier contents
    (bytes, or None for a file the editor created) for ``undo_edit``."""

    def __init__(self, root: str | os.PathLike, history: dict[str, list[bytes | None]] | None = None) -> None:
        self.root = Path(root).resolve()
        self.history = history if history is not None else {}

    def resolve(self, path: str) -> tuple[Path, str]:
        if not path:
            raise EditorError("argument 'path' is empty; give a path relative to the repository root")
        raw = Path(path)
        full = (raw if raw.is_absolute() else self.root / raw).resolve()
        outside = outside_workspace(self.root, path)
        if outside:
            raise EditorError(outside)
        return full, str(full.relative_to(self.root)) if full != self.root else "."

    def _read(self, full: Path, rel: str) -> tuple[bytes, FileText]:
        if not full.exists():
            raise EditorError(f"file '{rel}' does not exist; create it with command 'create'")
        if full.is_dir():
            raise EditorError(f"'{rel}' is a directory; only 'view' works on directories")
        data = full.read_bytes()
        if b"\x00" in data[:8192] and not data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
            raise EditorError(f"'{rel}' is a binary file; the editor only edits text")
        return data, FileText.decode(data)

    def _save(self, full: Path, rel: str, old: bytes | None, new: bytes) -> None:
        stack = self.history.setdefault(rel, [])
        stack.append(old)
        del stack[:-MAX_UNDO]
        full.parent.mkdir(parents=True, exist_ok=True)
        full.write_bytes(new)

    # -- commands ----------------------------------------------------------------------------------------------
    def view(self, path: str, view_range: list[int] | None = None) -> str:
        full, rel = self.resolve(path)
        if full.is_dir():
            if view_range:
                raise EditorError("view_range applies to files, not directories")
            return self._list_dir(full, rel)
        _data, ft = self._read(full, rel)
        lines = ft.text.split("\n")
        if ft.text.endswith("\n"):
            lines.pop()
        first, last = 1, len(lines)
        if view_range:
            if len(view_range) != 2 or not all(isinstance(v, int) for v in view_range):
                raise EditorError("view_range must be two integers [start, end] (end -1 = to the end of the file)")
            first, last = view_range
            if last == -1:
                last = len(lines)
            if not 1 <= first <= max(len(lines), 1):
                raise EditorError(f"view_range start {first} is outside the file's lines 1..{len(lines)}")
            if last < first:
                raise EditorError(f"view_range end {last} is before its start {first}; use -1 for the end of file")
            last = min(last, len(lines))
        body = _numbered(lines[first - 1:last], first)
        if len(body) > MAX_VIEW_CHARS:
            cut = body[:MAX_VIEW_CHARS]
            shown_last = first + cut.count("\n") - 1
            body = (cut[: cut.rfind("\n")] + f"\n[file truncated at line {shown_last}: view the rest with "
                    f"view_range [{shown_last + 1}, {last}], or search it for a definition]")
        notes = []
        if ft.mixed:
            notes.append("mixed CRLF and LF line endings, each line's kept on edit")
        elif ft.crlf:
            notes.append("CRLF line endings, kept on edit")
        if ft.encoding != "utf-8" or ft.bom:
            notes.append(f"encoding {ft.encoding}{' with BOM' if ft.bom else ''}, kept on edit")
        header = f"Here's the result of running `cat -n` on {rel}" + (f" ({'; '.join(notes)})" if notes else "") + ":"
        return f"{header}\n{body}"

    def _list_dir(self, full: Path, rel: str) -> str:
        rows: list[str] = []

        def walk(d: Path, depth: int) -> None:
            try:
                entries = sorted(d.iterdir(), key=lambda p: (not p.is_dir(), p.name))
            except OSError:
                return
            for p in entries:
                if p.name.startswith(".") or p.name == "__pycache__":
                    continue
                rows.append(str(p.relative_to(self.root)) + ("/" if p.is_dir() else ""))
                if p.is_dir() and depth < DIR_DEPTH:
                    walk(p, depth + 1)
                if len(rows) > 400:
                    return

        walk(full, 1)
        more = "\n[listing truncated at 400 entries; view a subdirectory]" if len(rows) > 400 else ""
        return (f"Files and directories up to {DIR_DEPTH} levels deep in {rel}, excluding hidden items:\n"
                + "\n".join(rows[:400]) + more)

    def create(self, path: str, file_text: str | None) -> str:
        if file_text is None:
            raise EditorError("command 'create' needs 'file_text' (the whole content of the new file)")
        full, rel = self.resolve(path)
        if full.exists():
            raise EditorError(f"file '{rel}' already exists; edit it with 'str_replace' or 'insert' "
                              f"(create does not overwrite)")
        self._save(full, rel, None, FileText(raw=file_text).encode())  # written exactly as given
        return f"File created successfully at: {rel}"

    def str_replace(self, path: str, old_str: str | None, new_str: str | None) -> str:
        if old_str is None or old_str == "":
            raise EditorError("command 'str_replace' needs a non-empty 'old_str' copied exactly from the file "
                              "(view the file first)")
        full, rel = self.resolve(path)
        data, ft = self._read(full, rel)
        old = old_str.replace("\r\n", "\n")
        new = (new_str or "").replace("\r\n", "\n")
        count = ft.text.count(old)
        if count == 0:
            raise EditorError(self._no_match(ft.text, old, rel))
        if count > 1:
            lines = []
            start = 0
            while (pos := ft.text.find(old, start)) >= 0:
                lines.append(ft.text.count("\n", 0, pos) + 1)
                start = pos + 1
            raise EditorError(f"old_str occurs {count} times in {rel} (starting at lines "
                              f"{', '.join(map(str, lines))}); include more surrounding lines so it matches exactly "
                              f"once")
        pos = ft.text.index(old)
        text = ft.text[:pos] + new + ft.text[pos + len(old):]
        self._save(full, rel, data, ft.encode(ft.splice(pos, pos + len(old), new)))
        line = ft.text.count("\n", 0, pos) + 1
        return self._snippet(rel, text, line, line + new.count("\n"), "edited")

    @staticmethod
    def _no_match(text: str, old: str, rel: str) -> str:
        msg = f"old_str did not appear verbatim in {rel}; nothing was replaced."
        squash = lambda s: " ".join(s.split())  # noqa: E731
        target = squash(old)
        first = old.strip().split("\n")[0].strip()
        lines = text.split("\n")
        if target and target in squash(text):
            msg += (" It matches when whitespace is ignored: copy the indentation exactly (the file uses "
                    f"{'tabs' if any(l.startswith(chr(9)) for l in lines) else 'spaces'}) from a fresh 'view'.")
        elif first:
            near = [i + 1 for i, l in enumerate(lines) if first in l][:5]
            if near:
                msg += f" Its first line occurs at line(s) {', '.join(map(str, near))}; the lines after it differ."
        return msg + " View the file (with view_range) and copy the text exactly."

    def insert(self, path: str, insert_line: int | None, new_str: str | None) -> str:
        if insert_line is None or new_str is None:
            raise EditorError("command 'insert' needs 'insert_line' (insert after this line; 0 = at the top) "
                              "and 'new_str'")
        full, rel = self.resolve(path)
        data, ft = self._read(full, rel)
        lines = ft.text.split("\n")
        trailing = ft.text.endswith("\n")
        if trailing:
            lines.pop()
        if not 0 <= insert_line <= len(lines):
            raise EditorError(f"insert_line {insert_line} is outside 0..{len(lines)} (the file has {len(lines)} "
                              f"lines; 0 inserts at the top)")
        new_lines = new_str.replace("\r\n", "\n").split("\n")
        # the byte offset after line insert_line; the inserted lines take the ending of the line before them
        at = sum(len(line) + 1 for line in lines[:insert_line])
        block = "\n".join(new_lines) + "\n"
        if at > len(ft.text):  # after a last line that has no final newline: the break goes before the block
            at, block = len(ft.text), "\n" + "\n".join(new_lines)
        lines[insert_line:insert_line] = new_lines
        text = "\n".join(lines) + ("\n" if trailing or not lines else "")
        ending = ft.ending_near(max(at - 1, 0))
        raw = ft.raw[:ft.raw_index(at)] + block.replace("\n", ending) + ft.raw[ft.raw_index(at):]
        self._save(full, rel, data, ft.encode(raw))
        return self._snippet(rel, text, insert_line + 1, insert_line + len(new_lines), "inserted into")

    def undo_edit(self, path: str) -> str:
        full, rel = self.resolve(path)
        stack = self.history.get(rel)
        if not stack:
            raise EditorError(f"no edit to undo for {rel} (undo works on edits made with this editor)")
        previous = stack.pop()
        if previous is None:
            full.unlink(missing_ok=True)
            return f"Undid the creation of {rel}: the file is removed."
        full.write_bytes(previous)
        ft = FileText.decode(previous)
        return f"Last edit to {rel} undone.\n" + self.view(path) if len(ft.text) < 4000 else \
            f"Last edit to {rel} undone ({ft.text.count(chr(10)) + 1} lines)."

    @staticmethod
    def _snippet(rel: str, text: str, first: int, last: int, verb: str) -> str:
        lines = text.split("\n")
        lo = max(1, first - SNIPPET_CONTEXT)
        hi = min(len(lines), last + SNIPPET_CONTEXT)
        return (f"The file {rel} has been {verb}. Here's the result of running `cat -n` on a snippet of {rel}:\n"
                f"{_numbered(lines[lo - 1:hi], lo)}\nReview the changes and make sure they are as expected. "
                f"Edit the file again if necessary.")

    def run(self, args: dict[str, Any]) -> str:
        command = args["command"]
        path = args["path"]
        if command == "view":
            return self.view(path, args.get("view_range"))
        if command == "create":
            return self.create(path, args.get("file_text"))
        if command == "str_replace":
            return self.str_replace(path, args.get("old_str"), args.get("new_str"))
        if command == "insert":
            return self.insert(path, args.get("insert_line"), args.get("new_str"))
        if command == "undo_edit":
            return self.undo_edit(path)
        raise EditorError(f"unknown command '{command}'; valid: view, create, str_replace, insert, undo_edit")


async def run_editor(args: dict, ctx: ToolContext) -> ToolResult:
    root, failure = await workspace_for_tool(ctx, "str_replace_editor")
    if failure is not None:
        return failure
    store = ctx.tool_store("str_replace_editor")
    editor = Editor(root, store.setdefault("history", {}))
    try:
        output = await asyncio.to_thread(editor.run, args)
    except EditorError as exc:
        return ToolResult(output=f"Error: {exc}", error=True, metadata={"command": args.get("command")})
    except OSError as exc:
        return ToolResult(output=f"Error: {args.get('command')} on '{args.get('path')}' failed: {exc.strerror or exc}",
                          error=True, metadata={"command": args.get("command")})
    return ToolResult(output=output, metadata={"command": args["command"]})
