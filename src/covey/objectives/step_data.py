"""The offline step-level data of `direct_advantage_provisional`, built from a policy and a task.

    1. per item, one solution y ~ pi_ref (the engine's policy), cut into steps after every `sep`
    2. states s_0 = "" (the bare question), s_i = the first i steps (at most `max_states` per item);
       Monte-Carlo value of each: the mean verifier reward of `mc` continuations of prompt + s_i
       (the whole solution's value is its own reward)
    3. the critic (`ValueCritic`) is fitted to those values: V(prompt + s) ~ MC value
    4. per state, `k` candidate next steps a ~ pi_ref (a continuation cut after its first `sep`), and
       their advantages A(s, a) = V(s + a) - V(s) from the critic
    5. rows {"prompt", "prefix": s, "candidates": [a_1..a_k], "advantages": [A_1..A_k], ...item columns}

This follows the pipeline the paper describes (arXiv 2412.18279: a critic trained first on partial solutions'
success probabilities, candidate steps from the reference policy, step advantages from the critic);
the step separator, the number of states, candidates and MC continuations are covey's choices.
`scripts/direct_advantage_data.py` runs it and writes `steps.jsonl` and `critic.pt`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch

from covey.engine.base import SamplingParams
from covey.models import apply_chat
from covey.objectives.critic import ValueCritic
from covey.rollouts import item_columns

__all__ = ["build_step_data", "split_steps"]

Verify = Callable[[list[dict], list[str]], list[float]]


def split_steps(text: str, sep: str = "\n") -> list[str]:
    """`text` cut after every `sep` (each step keeps its separator); empty pieces dropped.

    >>> split_steps("a\\nb\\n\\nc")
    ['a\\n', 'b\\n', '\\n', 'c']
    """
    out, start = [], 0
    while True:
        i = text.find(sep, start)
        if i < 0:
            break
        out.append(text[start : i + len(sep)])
        start = i + len(sep)
    if start < len(text):
        out.append(text[start:])
    return [s for s in out if s]


def _state_ids(tok, item: dict, prefix: str) -> list[int]:
    return list(apply_chat(tok, item["prompt"])) + (list(tok.encode(prefix, add_special_tokens=False)) if prefix else [])


def _continue(engine, tok, item, prefix: str, n: int, sampling: SamplingParams) -> list[str]:
    gen = engine.generate([_state_ids(tok, item, prefix)], n, sampling)
    return tok.batch_decode([r[: int(m.sum())].tolist() for r, m in zip(gen.completion_ids, gen.completion_mask)],
                            skip_special_tokens=True)  # fmt: skip


def task_verifier(task) -> Verify:
    """verify(items, full_texts) -> rewards through the task's own verifier."""
    from covey.tasks.base import hooks_of

    reward = hooks_of(task).reward
    if reward is None:
        raise ValueError("direct advantage data: the task has no verifier to measure partial solutions with")

    def verify(items: list[dict], texts: list[str]) -> list[float]:
        cols = item_columns(items)
        return [float(v or 0.0) for v in reward([it["prompt"] for it in items], texts, **cols)]

    return verify


def build_step_data(engine, tok, critic: ValueCritic, items: list[dict], verify: Verify, *, sampling: SamplingParams,
                    k: int = 4, mc: int = 4, max_states: int = 4, sep: str = "\n", critic_steps: int = 30,
                    critic_lr: float = 3e-4, seed: int = 0) -> tuple[list[dict], dict[str, float]]:  # fmt: skip
    """Rows of offline step data and metrics (module docstring); the critic is fitted in place."""
    if k < 1 or mc < 1 or max_states < 1:
        raise ValueError(f"direct advantage data: k, mc and max_states must be >= 1 (got {k}, {mc}, {max_states})")
    sp = lambda r: dataclasses.replace(sampling, seed=(sampling.seed or 0) * 1000 + r)  # noqa: E731
    states: list[tuple[dict, str]] = []
    seqs, targets = [], []
    for j, item in enumerate(items):
        solution = _continue(engine, tok, item, "", 1, sp(3 * j))[0]
        steps = split_steps(solution, sep)
        prefixes = ["".join(steps[:i]) for i in range(min(len(steps), max_states))] or [""]
        for p_i, prefix in enumerate(prefixes):
            conts = _continue(engine, tok, item, prefix, mc, sp(3 * j + 1 + 7919 * p_i))
            value = sum(verify([item] * mc, [prefix + c for c in conts])) / mc
            states.append((item, prefix))
            seqs.append(_state_ids(tok, item, prefix))
            targets.append(value)
        if steps:  # the whole solution: its own reward
            seqs.append(_state_ids(tok, item, solution))
            targets.append(verify([item], [solution])[0])
    gen = torch.Generator().manual_seed(seed)
    fit_error = critic.fit(seqs, torch.tensor(targets), steps=critic_steps, lr=critic_lr, generator=gen)
    rows = []
    for s_i, (item, prefix) in enumerate(states):
        conts = _continue(engine, tok, item, prefix, k, sp(100_003 + s_i))
        cands = [(c[: c.find(sep) + len(sep)] if sep in c else c) or c for c in conts]
        cands = [c for c in cands if c]
        if not cands:
            continue
        base = _state_ids(tok, item, prefix)
        values = critic.values([base] + [base + list(tok.encode(c, add_special_tokens=False)) for c in cands])
        adv = (values[1:] - values[0]).tolist()
        keep = {key: v for key, v in item.items() if key not in ("id", "prompt")}
        rows.append({**keep, "prompt": item["prompt"], "prefix": prefix, "candidates": cands, "advantages": adv})
    metrics = {"states": float(len(states)), "rows": float(len(rows)), "critic_mse": fit_error,
               "mc_value_mean": sum(targets) / len(targets) if targets else 0.0}  # fmt: skip
    return rows, metrics
