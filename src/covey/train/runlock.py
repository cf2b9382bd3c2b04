"""One process per run folder: RUN/.lock holds the owner's pid under an exclusive `flock`.

The kernel drops the lock when the owner exits, however it exits (kill -9 included), so a stale
file never blocks a resume; a second live process is refused with the owner's pid.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

__all__ = ["RunLock", "RunLocked"]


class RunLocked(RuntimeError):
    """Another live process holds the run folder."""


class RunLock:
    def __init__(self, run_dir: str | Path):
        self.path = Path(run_dir) / ".lock"
        self._fd: int | None = None

    def acquire(self) -> "RunLock":
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            owner = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise RunLocked(
                f"{self.path.parent} is in use by another covey process (pid {owner}); wait for it to finish or stop it "
                "(its Ctrl-C/SIGTERM saves a checkpoint), then resume"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None
