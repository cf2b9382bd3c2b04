"""`render(plan)`: a `MemoryPlan` as rich tables, one per pool, and one verdict line per device."""

from __future__ import annotations

from covey.plan.memory import GiB, Pool
from covey.plan.planner import MemoryPlan

__all__ = ["render"]


def _gib(n: float) -> str:
    return f"{n / GiB:.2f}"


def _pool_table(pool: Pool, title: str):
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for col, kw in (("item", {}), ("GiB", {"justify": "right"}), ("when", {}), ("where", {}), ("what", {})):
        table.add_column(col, **kw)
    for i in pool.items:
        table.add_row(i.name, _gib(i.bytes), i.phase, i.where, i.note)
    table.add_section()
    table.add_row("peak per device", _gib(pool.peak), "", "device", "static + the largest other phase"
                  + ("; at least the reserved share" if pool.reserved else ""))  # fmt: skip
    if pool.host:
        table.add_row("host memory per device", _gib(pool.host), "", "host", "offloaded state (runtime.fsdp_offload)")
    return table


def render(plan: MemoryPlan, console=None) -> None:
    """Print `plan`: a header line, the learner's and the engine's tables, the verdicts and notes."""
    from rich.console import Console

    console = console or Console(width=160)
    s, a = plan.settings, plan.arch
    console.print(
        f"[bold]{plan.model}[/bold]: {a.total / 1e9:.3g}B parameters ({a.layers} layers, hidden {a.hidden}, "
        f"{a.heads}/{a.kv_heads} heads, vocab {a.vocab}{', tied head' if a.tied else ''}); {s.device}, learner {s.dtype}, "
        f"engine {s.engine} {s.engine_dtype}; {s.prompts_per_step} prompts x {s.group_size} rows, prompts of "
        f"{s.prompt_tokens} tokens (--prompt-tokens) + {s.new_tokens} new"
    )  # fmt: skip
    sharding = f", {s.sharding}" + (" + offload" if s.fsdp_offload else "") if s.executor == "ray" else ""
    lora = f", LoRA r={s.lora_rank}" if s.lora_rank else ""
    ckpt = ", gradient checkpointing" if s.gradient_checkpointing else ""
    console.print(_pool_table(plan.learner, f"learner: {plan.learner.devices} device(s){sharding}{lora}{ckpt}"))
    console.print(_pool_table(plan.engine, f"engine: {plan.engine.devices} device(s)"))
    for d in plan.devices:
        style = "green" if d.fits else "red"
        console.print(f"[{style}]{d.count} x {d.name}: {_gib(d.bytes)} GiB: {d.verdict()}[/{style}]")
    for note in plan.learner.notes + plan.engine.notes + plan.notes:
        console.print(f"note: {note}")
