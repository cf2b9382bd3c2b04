"""The judge's reply cache: an in-memory LRU plus an optional SQLite file (e.g. RUN/judge_cache.sqlite).

Key = SHA-256 of (backend kind, model id, model fingerprint, template hash, rendered messages, decoding
settings, choices); value = the reply (text, or the choices' log-probs as JSON). Only replies that parsed
are stored, so a failure is asked again next time. The SQLite file may be shared by worker processes
(WAL mode, a busy timeout); a write that fails (locked for too long, disk full) is logged once and
skipped: the cache is an optimisation, never a reason to fail a reward.
"""

from __future__ import annotations

import hashlib
import json
import logging
import sqlite3
from collections import OrderedDict
from pathlib import Path

__all__ = ["JudgeCache", "cache_key"]

log = logging.getLogger(__name__)


def cache_key(*parts) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


class JudgeCache:
    """get(key) -> stored value or None; put(key, value). size: LRU entries (0 = no memory cache)."""

    def __init__(self, size: int = 8192, path: str | Path | None = None):
        self.size, self.path = int(size), (Path(path).expanduser() if path else None)
        self._mem: OrderedDict[str, str] = OrderedDict()
        self._db: sqlite3.Connection | None = None
        self._warned = False

    def __getstate__(self):  # a worker reopens the file itself
        return {"size": self.size, "path": self.path}

    def __setstate__(self, state):
        self.__init__(state["size"], state["path"])

    def _conn(self) -> sqlite3.Connection | None:
        if self.path is None:
            return None
        if self._db is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(str(self.path), timeout=30, isolation_level=None, check_same_thread=False)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("CREATE TABLE IF NOT EXISTS replies (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        return self._db

    def get(self, key: str) -> str | None:
        if key in self._mem:
            self._mem.move_to_end(key)
            return self._mem[key]
        db = self._conn()
        if db is None:
            return None
        row = db.execute("SELECT value FROM replies WHERE key = ?", (key,)).fetchone()
        if row is not None:
            self._remember(key, row[0])
            return row[0]
        return None

    def put(self, key: str, value: str) -> None:
        self._remember(key, value)
        db = self._conn()
        if db is None:
            return
        try:
            db.execute("INSERT OR REPLACE INTO replies (key, value) VALUES (?, ?)", (key, value))
        except sqlite3.Error as e:
            if not self._warned:
                self._warned = True
                log.warning("judge cache: could not write to %s (%s); going on without storing replies there", self.path, e)

    def _remember(self, key: str, value: str) -> None:
        if self.size <= 0:
            return
        self._mem[key] = value
        self._mem.move_to_end(key)
        while len(self._mem) > self.size:
            self._mem.popitem(last=False)

    def __len__(self) -> int:
        return len(self._mem)
