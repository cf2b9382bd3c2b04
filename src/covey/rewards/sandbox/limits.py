"""Types of the sandbox: its limits, a run's result, and the error raised where it cannot run."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["RunResult", "SandboxLimits", "SandboxUnavailable"]


class SandboxUnavailable(RuntimeError):
    """bubblewrap cannot run here and the caller did not opt into the weaker rlimit-only mode."""


@dataclass(frozen=True)
class SandboxLimits:
    """Resource limits for one sandboxed program.

    timeout_s: wall-clock limit; the whole process tree is killed when it passes.
    cpu_s: CPU-seconds per process (RLIMIT_CPU); None = ceil(timeout_s).
    memory_mb: address space per process (RLIMIT_AS).
    file_mb: largest file a process may write (RLIMIT_FSIZE).
    tmpfs_mb: size of the private writable /tmp (the working directory).
    nproc: processes/threads the sandbox uid may have (RLIMIT_NPROC).
    nofile: open file descriptors per process (RLIMIT_NOFILE).
    max_output_bytes: bytes of stdout and of stderr kept; the rest is read and dropped.
    max_drain_bytes: total output after which the program is killed (limit_hit="output").
    """

    timeout_s: float = 10.0
    cpu_s: float | None = None
    memory_mb: int = 512
    file_mb: int = 16
    tmpfs_mb: int = 64
    nproc: int = 16
    nofile: int = 64
    max_output_bytes: int = 64 * 1024
    max_drain_bytes: int = 8 * 1024 * 1024

    def __post_init__(self):
        for name in ("timeout_s", "memory_mb", "file_mb", "tmpfs_mb", "nproc", "nofile", "max_output_bytes"):
            value = getattr(self, name)
            if not value > 0:
                raise ValueError(f"SandboxLimits.{name} must be > 0, got {value!r}")
        if self.cpu_s is not None and not self.cpu_s > 0:
            raise ValueError(f"SandboxLimits.cpu_s must be > 0 or None, got {self.cpu_s!r}")

    @property
    def cpu_seconds(self) -> int:
        return max(1, int(-(-(self.cpu_s or self.timeout_s) // 1)))


@dataclass
class RunResult:
    """What a sandboxed program did.

    exit_code: the program's exit status; 128+signal when a signal killed it; -9 when the host killed
        it (timeout, output flood).
    timed_out: the wall-clock limit passed.
    limit_hit: best-effort name of the limit that stopped it: "timeout", "cpu", "memory", "file_size",
        "processes", "output", or None.
    sandboxed: False only in the explicit rlimit-only mode.
    """

    exit_code: int
    stdout: str
    stderr: str
    timed_out: bool = False
    limit_hit: str | None = None
    sandboxed: bool = True
    elapsed_s: float = 0.0
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    channel: bytes = b""  # what the program wrote to its result descriptor (run_tests' harness)

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out
