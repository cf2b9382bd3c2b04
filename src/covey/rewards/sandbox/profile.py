"""What a sandboxed program may see beyond the stdlib: a named profile of read-only paths, environment and imports.

The default profile, `STDLIB`, is the sandbox as it always was: ``python -I -B -S`` with only /usr and the
interpreter's prefix mounted. A profile adds directories bound read-only at their own path (their parents
are created empty and traversable, as for the interpreter prefix), environment variables, and entries
prepended to ``sys.path`` by a one-line bootstrap (the interpreter still runs isolated, without `site`:
no .pth file of those directories is executed). The torch profile is `torch_profile.py`'s.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

__all__ = ["STDLIB", "Profile"]

_BOOT = ("import sys; sys.path[0:0] = {paths!r}; sys.argv = sys.argv[1:]; import runpy; "
         "runpy.run_path(sys.argv[0], run_name='__main__')")


@dataclass(frozen=True)
class Profile:
    """name: for messages; ro_paths: directories bound read-only; env: (key, value) pairs; sys_path: import roots."""

    name: str
    ro_paths: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    sys_path: tuple[str, ...] = ()

    def __post_init__(self):
        for p in (*self.ro_paths, *self.sys_path):
            if not os.path.isabs(p) or os.path.normpath(p) != p or p == "/":
                raise ValueError(f"sandbox profile {self.name!r}: paths must be absolute and normalised, got {p!r}")
        for p in self.sys_path:
            if not any(p == r or p.startswith(r + "/") for r in self.ro_paths):
                raise ValueError(f"sandbox profile {self.name!r}: sys_path entry {p!r} is under no ro_paths entry")

    def bwrap_binds(self, visible: tuple[str, ...] = ("/usr",)) -> list[str]:
        """bwrap arguments that bind `ro_paths` read-only; paths under a `visible` root (already bound) are skipped.

        >>> Profile("x", ro_paths=("/opt/a/b", "/opt/c", "/usr/lib/x")).bwrap_binds()
        ['--perms', '0755', '--dir', '/opt', '--perms', '0755', '--dir', '/opt/a', '--ro-bind', '/opt/a/b', '/opt/a/b', '--ro-bind', '/opt/c', '/opt/c']
        """
        def under(p: str) -> bool:
            return any(p == r or p.startswith(r.rstrip("/") + "/") for r in visible)

        cmd: list[str] = []
        made: set[str] = set()
        for path in self.ro_paths:
            if under(path):
                continue
            parts = path.strip("/").split("/")
            for i in range(1, len(parts)):
                parent = "/" + "/".join(parts[:i])
                if parent not in made and not under(parent):
                    made.add(parent)
                    cmd += ["--perms", "0755", "--dir", parent]
            cmd += ["--ro-bind", path, path]
        return cmd

    def python_args(self) -> list[str]:
        """Interpreter arguments before the program's: isolated, no bytecode, no `site`; the bootstrap if any.

        >>> STDLIB.python_args()
        ['-I', '-B', '-S']
        """
        if not self.sys_path:
            return ["-I", "-B", "-S"]
        return ["-I", "-B", "-S", "-c", _BOOT.format(paths=list(self.sys_path))]


STDLIB = Profile("stdlib")
