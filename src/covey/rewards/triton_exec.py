"""`triton_exec`: AutoTriton's execution reward times its rule-based gate (arXiv 2507.05687).

AutoTriton trains with GRPO on a reward that combines a rule-based check (the program must really use
Triton: `triton_gate`) with an execution check (the program's module, run on test inputs, must match the
reference PyTorch module). Reconstructed from the paper: its repository (AI9Stars/AutoTriton) has no
stored snapshot and its reward code was not read (searched 2026-11-24). The execution check follows
KernelBench's `run_and_check_correctness` (the harness AutoTriton evaluates with): the item's reference
program defines ``Model``, ``get_inputs()`` and ``get_init_inputs()``; the completion's last ```python block
defines ``ModelNew``; each of `trials` seeds draws inputs, both modules (built after ``torch.manual_seed(42)``)
run on them under ``torch.no_grad()``, and a trial passes when the shapes and dtypes agree (KernelBench's
``torch.allclose`` refuses a float16 output against a float32 reference) and
``|new - ref| <= atol + rtol * |ref|`` everywhere (atol = rtol = 1e-2, KernelBench's; NaN never passes)::

    reward = gate * exec         gate = triton_gate(program) and, on every trial, the run-time gate
                                        (language "triton"; 1 for "torch")
                                 exec = 1 iff every trial passes, else 0

The run-time gate (covey's; the static rules are read from the text and missed getattr(torch, "matmul"),
``x.__matmul__``, ``nn.Linear`` / ``nn.Softmax`` modules, ``torch.tensordot`` and eval / exec, each scoring 1.0
with a do-nothing kernel): the candidate's forward runs under a recorder of every aten op (a
``TorchDispatchMode`` in the sandbox, `_tensor_harness.py`), of reads of tensor data into Python / NumPy and of
threads started, and counts Triton launches; a trial passes the gate when at least one kernel was launched and
every op is allocation, a view, a copy or metadata (`triton_gate.RUNTIME_ALLOW`, plus `allow_ops`). What it
cannot see: work done in NumPy or Python on data reached without those reads (e.g. through raw pointers), code
that removes the recorder for a while and puts it back (the static filter refuses the names it knows:
torch._C, _python_dispatch, ctypes, ...), and, under the interpreter, kernel bodies that run NumPy / Python a
GPU compiler would refuse. A data-movement task (a transpose) can be done with allowed ops alone.

The reference runs in one sandbox (cached per item), the program in another: neither sees the other's
outputs, and only data (tensors as bytes) comes back; the comparison runs here (`sandbox/tensors.py`).
Both run in the sandbox's torch profile (read-only torch / numpy / triton, no network,
``TRITON_INTERPRET=1``: kernels run in Triton's CPU interpreter). A program that fails the gate is not run.
Items without a reference score None; a reference that fails to run scores None and is counted
(``reference_error``: the fraction of items whose reference failed).

``language: torch`` scores plain-PyTorch rewrites (no gate, no triton needed): the same harness for tasks
that ask for a faster or restructured PyTorch module.
"""

from __future__ import annotations

import dataclasses
import logging

from covey.rewards._scoring import RewardOutput
from covey.rewards.code import extract_code
from covey.rewards.math import completion_text
from covey.rewards.registry import register_reward
from covey.rewards.sandbox.tensors import compare, decode, run_module
from covey.rewards.sandbox.torch_profile import TORCH_LIMITS, triton_available
from covey.rewards.triton_gate import DEFAULT_DENY, RUNTIME_ALLOW, runtime_gate, triton_structure

__all__ = ["TritonExec"]

log = logging.getLogger(__name__)

_OUTCOMES = ("pass", "gate", "runtime_gate", "no_code", "error", "mismatch", "timeout")


@register_reward("triton_exec")
class TritonExec:
    """1.0 when the completion's ``ModelNew`` uses Triton (`triton_gate`) and matches the reference module on every trial.

    Params: `column` (the reference program; default ``reference``), `language` (``triton`` | ``torch``),
    `trials` (seeds `seed` .. `seed` + trials - 1), `atol`, `rtol`, `timeout_s` and `memory_mb` (per sandbox
    run), `deny` / `extra_deny` (the gate's, as in `triton_gate`), `allow_ops` (aten ops the forward may run
    besides `RUNTIME_ALLOW`, e.g. ``[cat]``), `allow_unsandboxed`.
    Metrics: the fraction of each outcome (``pass``, ``gate``: failed the static gate, ``runtime_gate``: PyTorch
    did the work or no kernel ran, ``no_code``, ``error``: did not load, raised, or wrote a result the host
    refuses, ``mismatch``: wrong shape, dtype or values, ``timeout``) and ``reference_error``. After a call,
    `last_outcomes` holds each completion's (outcome, message), e.g. ``("mismatch", "trial 0: output: shape ...")``.
    """

    def __init__(self, column: str = "reference", language: str = "triton", trials: int = 5, seed: int = 0,
                 atol: float = 1e-2, rtol: float = 1e-2, timeout_s: float = 120.0, memory_mb: int = TORCH_LIMITS.memory_mb,
                 deny: list[str] | None = None, extra_deny: list[str] | None = None,
                 allow_ops: list[str] | None = None, allow_unsandboxed: bool | None = None):
        if language not in ("triton", "torch"):
            raise ValueError(f"triton_exec: language must be 'triton' or 'torch', got {language!r}")
        if language == "triton" and not triton_available():
            raise ValueError("triton_exec: the triton package is not installed, so kernels cannot run (pip install "
                             "'covey[triton]', about 1 GB; Triton's CPU interpreter runs them), or use language: torch "
                             "for plain PyTorch programs")  # fmt: skip
        if type(trials) is not int or trials < 1:
            raise ValueError(f"triton_exec: trials must be an integer >= 1, got {trials!r}")
        if not (atol >= 0 and rtol >= 0):
            raise ValueError(f"triton_exec: atol and rtol must be >= 0, got {atol!r}, {rtol!r}")
        if not timeout_s > 0:
            raise ValueError(f"triton_exec: timeout_s must be > 0, got {timeout_s!r}")
        self.limits = dataclasses.replace(TORCH_LIMITS, timeout_s=float(timeout_s), memory_mb=memory_mb)  # validates
        self.column, self.language, self.atol, self.rtol = column, language, float(atol), float(rtol)
        self.seeds = [seed + k for k in range(trials)]
        self.deny = tuple(deny if deny is not None else DEFAULT_DENY) + tuple(extra_deny or ())
        if not all(isinstance(op, str) and op for op in allow_ops or ()):
            raise ValueError(f"triton_exec: allow_ops must be a list of aten op names (e.g. [cat]), got {allow_ops!r}")
        self.allow_ops = RUNTIME_ALLOW | frozenset(allow_ops or ())
        self.allow_unsandboxed = allow_unsandboxed
        self._references: dict[str, tuple | str] = {}  # reference source -> (init, [inputs], [outputs]) or error
        self.__name__ = "triton_exec"

    def reference(self, source: str) -> tuple | str:
        """(init, inputs per trial, decoded outputs per trial) of a reference program, or why it failed (cached,
        except a timeout)."""
        if source not in self._references:
            run = run_module(source, "reference", self.seeds, limits=self.limits, allow_unsandboxed=self.allow_unsandboxed)
            if run.error is None and run.init is not None:
                try:
                    outs = [decode(r["out"]) for r in run.records]
                    self._references[source] = (run.init, [r["inputs"] for r in run.records], outs)
                except ValueError as e:
                    self._references[source] = f"reference output: {e}"
            elif run.timed_out:  # not cached: a slow moment is not a broken reference
                return run.error or "the reference timed out"
            else:
                self._references[source] = run.error or "the reference reported no init inputs"
        return self._references[source]

    def score(self, code: str | None, source: str) -> tuple[str, str]:
        """(outcome, message) for one program against one reference program; outcome ``reference``: the reference failed."""
        if code is None:
            return "no_code", "no ```python block"
        if self.language == "triton":
            f = triton_structure(code, self.deny)
            if not (f["kernel"] and f["launch"] and not f["denied"]):
                return "gate", f"gate: {f}"
        ref = self.reference(source)  # run only for a program that is to be run
        if isinstance(ref, str):
            return "reference", ref
        init, inputs, refs = ref
        traced = self.language == "triton"
        run = run_module(code, "candidate", self.seeds, init=init, inputs=inputs, limits=self.limits,
                         allow_unsandboxed=self.allow_unsandboxed, trace=traced)
        if run.error is not None:
            return ("timeout" if run.timed_out else "error"), run.error
        for k, (rec, expected) in enumerate(zip(run.records, refs)):
            why = runtime_gate(rec.get("trace"), self.allow_ops) if traced else None
            if why is not None:
                return "runtime_gate", f"trial {k}: {why}"
            try:
                out = decode(rec["out"])
            except ValueError as e:
                return "error", f"trial {k}: output: {e}"
            why = compare(out, expected, self.atol, self.rtol)
            if why is not None:
                return "mismatch", f"trial {k}: {why}"
        return "pass", ""

    def __call__(self, prompts, completions, **columns) -> RewardOutput:
        if self.column not in columns:
            raise ValueError(f"triton_exec needs a {self.column!r} column with each item's reference program; "
                             f"got {sorted(columns)}")  # fmt: skip
        scores: list[float | None] = []
        outcomes: list[str] = []
        self.last_outcomes: list[tuple[str, str] | None] = []
        for c, source in zip(completions, columns[self.column]):
            if source is None:
                scores.append(None)
                self.last_outcomes.append(None)
                continue
            try:
                outcome, message = self.score(extract_code(completion_text(c)), source)
            except (ValueError, TypeError, OverflowError, RecursionError) as e:  # data the program wrote: its zero
                outcome, message = "error", f"the result could not be read: {type(e).__name__}: {str(e)[:200]}"
            self.last_outcomes.append((outcome, message))
            if outcome == "reference":
                log.warning("triton_exec: the reference program failed, its item scores None: %s", message)
            scores.append(None if outcome == "reference" else float(outcome == "pass"))
            outcomes.append(outcome)
        metrics = {o: [float(x == o) for x in outcomes] for o in _OUTCOMES} if outcomes else {}
        if outcomes:
            metrics["reference_error"] = [float(x == "reference") for x in outcomes]
        return RewardOutput(scores, metrics)
