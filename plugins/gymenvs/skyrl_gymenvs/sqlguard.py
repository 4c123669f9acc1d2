"""Only reading SQL reaches skyrl-gym's text2sql env.

The env (0.4.0) runs the agent's ``<sql>`` query, and at the end its ``<solution>`` query, on the database file
inside a transaction it rolls back. A rollback does not undo everything: ``ATTACH DATABASE '/any/path' AS x``
succeeds inside the transaction and creates that file on the host (found by this plugin's attack test). So before
an action reaches the env, every ``<sql>`` and ``<solution>`` body in it is compiled — never run — by SQLite on a
read-only connection to the same database with an authorizer that allows only reading (SELECT, table reads,
functions, recursive CTEs); a statement that needs anything else (ATTACH, PRAGMA, writes, DDL, transactions) is
refused with SQLite's own reason, and the action is not passed to the env.
"""

from __future__ import annotations

import re
import sqlite3

_BLOCK = re.compile(r"<(sql|solution)>(.*?)</\1>", re.DOTALL)
_ALLOWED = {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION, sqlite3.SQLITE_RECURSIVE}


def _authorize(action: int, *args) -> int:
    return sqlite3.SQLITE_OK if action in _ALLOWED else sqlite3.SQLITE_DENY


def refused_sql(action: str, db_file: str) -> str | None:
    """Why ``action`` holds SQL that does more than read (``"<tag>: <sqlite's message>"``), or None when every
    block in it only reads (or fails for another reason: a syntax error is the env's to report)."""
    blocks = [(tag, body) for tag, body in _BLOCK.findall(action) if body.strip()]
    if not blocks:
        return None
    conn = sqlite3.connect(f"file:{db_file}?mode=ro", uri=True)
    try:
        conn.set_authorizer(_authorize)
        for tag, body in blocks:
            try:
                conn.execute(f"EXPLAIN {body}").fetchall()  # compiles the statement (the authorizer runs), runs nothing
            except sqlite3.DatabaseError as exc:
                if "not authorized" in str(exc):
                    return f"<{tag}>: {exc}"
    finally:
        conn.close()
    return None
