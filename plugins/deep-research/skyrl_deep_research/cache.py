"""The web cache: sqlite on disk, keyed by provider + normalised query or URL, with a TTL.

One file is shared by every trajectory, worker process and run that points at it (sqlite's WAL mode lets
several processes read and write). Each entry stores the seconds the original call took, so a hit can report
the time it saved. Default location: ``<user cache dir>/skyrl/deep-research/web-cache.sqlite``.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
import time
import urllib.parse
from pathlib import Path
from typing import Any

SCHEMA = """CREATE TABLE IF NOT EXISTS web_cache (
    provider TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL,
    created REAL NOT NULL, cost_s REAL NOT NULL, PRIMARY KEY (provider, key))"""


def default_cache_path() -> Path:
    import platformdirs

    return Path(platformdirs.user_cache_dir("skyrl")) / "deep-research" / "web-cache.sqlite"


def normalise_query(query: str) -> str:
    """Lower-cased, whitespace collapsed: ``"  Ed  WOOD "`` and ``"ed wood"`` share an entry."""
    return " ".join(query.lower().split())


def normalise_url(url: str) -> str:
    """Scheme and host lower-cased, default port, fragment and trailing slash dropped, query keys sorted."""
    parts = urllib.parse.urlsplit(url.strip())
    host = (parts.hostname or "").lower()
    port = parts.port
    if port and not ((parts.scheme == "http" and port == 80) or (parts.scheme == "https" and port == 443)):
        host = f"{host}:{port}"
    query = urllib.parse.urlencode(sorted(urllib.parse.parse_qsl(parts.query, keep_blank_values=True)))
    path = parts.path.rstrip("/") or "/"
    return urllib.parse.urlunsplit((parts.scheme.lower(), host, path, query, ""))


class WebCache:
    """``get(provider, key)`` -> the stored JSON value or None; ``put(provider, key, value, cost_s)``.

    ``ttl_s`` (seconds; None: entries never expire) bounds an entry's age. Blocking sqlite work runs in a
    worker thread (``aget``/``aput``) so the event loop never waits on the disk.
    """

    def __init__(self, path: str | Path | None = None, ttl_s: float | None = 7 * 24 * 3600) -> None:
        self.path = Path(path) if path else default_cache_path()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.ttl_s = ttl_s
        self._local = threading.local()
        with self._connect() as db:
            db.execute(SCHEMA)

    def _connect(self) -> sqlite3.Connection:
        db = getattr(self._local, "db", None)
        if db is None:
            db = sqlite3.connect(self.path, timeout=30)
            db.execute("PRAGMA journal_mode=WAL")
            self._local.db = db
        return db

    def get(self, provider: str, key: str) -> tuple[Any, float] | None:
        """``(value, cost_s)`` of a fresh entry, else None (an expired entry is deleted)."""
        db = self._connect()
        row = db.execute("SELECT value, created, cost_s FROM web_cache WHERE provider = ? AND key = ?",
                         (provider, key)).fetchone()
        if row is None:
            return None
        value, created, cost_s = row
        if self.ttl_s is not None and time.time() - created > self.ttl_s:
            with db:
                db.execute("DELETE FROM web_cache WHERE provider = ? AND key = ?", (provider, key))
            return None
        return json.loads(value), float(cost_s)

    def put(self, provider: str, key: str, value: Any, cost_s: float) -> None:
        db = self._connect()
        with db:
            db.execute("INSERT OR REPLACE INTO web_cache VALUES (?, ?, ?, ?, ?)",
                       (provider, key, json.dumps(value, ensure_ascii=False), time.time(), float(cost_s)))

    async def aget(self, provider: str, key: str) -> tuple[Any, float] | None:
        return await asyncio.to_thread(self.get, provider, key)

    async def aput(self, provider: str, key: str, value: Any, cost_s: float) -> None:
        await asyncio.to_thread(self.put, provider, key, value, cost_s)

    def __len__(self) -> int:
        return self._connect().execute("SELECT COUNT(*) FROM web_cache").fetchone()[0]
