"""`step_correction` (SCOPE) end to end in the trainer: the judge's parsed first-error index decides the
kept prefix, the live policy writes the rest, and the off-policy mask covers exactly the corrector's
tokens. The first test scripts the judge (exact values); the slow one asks a real model judge."""

import math
import re
from pathlib import Path

import pytest
import torch
import yaml

import covey.strategies.step_correction as sc
from covey.rewards.judge.backends import JudgeReply
from covey.rollouts import Rollouts

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "judge" / "step_correction_smollm2.yaml"

# Three steps each; every answer is wrong (1-digit arithmetic never gives 99), so every row is judged.
SOLUTIONS = ["Add the ones.\n\nCarry the ten.\n\nThe answer is 99", "Read it.\n\nGuess.\n\nThe answer is 99"]
JUDGED_K = {SOLUTIONS[0]: r"\boxed{1}", SOLUTIONS[1]: r"\boxed{2}"}
KEPT = {SOLUTIONS[0]: "Add the ones.\n\n", SOLUTIONS[1]: "Read it.\n\nGuess.\n\n"}  # steps[:k] + blank line


class ScriptedJudge:
    """A first-error judge that answers from a table keyed by the solution in the FAPO prompt."""

    fingerprint = "scripted-first-error"

    def __init__(self):
        self.asked = []

    def complete(self, requests):
        out = []
        for r in requests:
            text = r.messages[-1][1]
            sol = re.search(r"\[AI Solution\]\n\n(.*?)\n\nYour task", text, re.S)
            self.asked.append(sol.group(1) if sol else None)
            out.append(JudgeReply(text=JUDGED_K.get(sol.group(1) if sol else "", "no index")))
        return out


def _scripted_sampler(tok):
    """Replace the sampled completions by SOLUTIONS (alternating), keeping the real prompts and groups."""
    real = sc.sample_groups

    def sample(engine, tokenizer, draws, sampling):
        b = real(engine, tokenizer, draws, sampling)
        rows = [tok.encode(SOLUTIONS[i % 2], add_special_tokens=False) + [tok.eos_token_id] for i in range(len(b))]
        t = max(map(len, rows))
        ids, mask = torch.full((len(b), t), tok.pad_token_id or 0, dtype=torch.long), torch.zeros(len(b), t)
        for i, r in enumerate(rows):
            ids[i, : len(r)], mask[i, : len(r)] = torch.tensor(r), 1.0
        lp = -0.5 * mask  # a fixed behaviour log-prob per sampled token: the kept prefix must carry it over
        return Rollouts(prompt_ids=b.prompt_ids, completion_ids=ids, completion_mask=mask, behaviour_logprobs=lp,
                        group=b.group, prompt_id=b.prompt_id, finish_reason=["stop"] * len(b), items=b.items).validate()

    return sample


def _config():
    return {
        "model": {"name": "tiny-llama"},
        "task": {"name": "arithmetic", "params": {"digits": 1, "n_train": 8, "n_test": 4}},
        "rollout": {"prompts_per_step": 2, "group_size": 2, "strategy": {
            "name": "step_correction", "judge": {"kind": "local", "model": "tiny-llama"}, "corrector_max_new_tokens": 6}},
        "sampling": {"max_new_tokens": 40},
        "algo": {"preset": "grpo", "kl": None},
        "optim": {"skip_zero_advantage": False},  # learn/offpolicy_frac below is compared with the whole batch's share
        "reward_workers": 0,
        "log": {"progress": False, "report_to": ["jsonl"]},
        "steps": 2,
    }  # fmt: skip


def test_scripted_first_error_sets_the_kept_prefix_and_the_offpolicy_mask(tmp_path, monkeypatch):
    from covey.train.config import validate_config
    from covey.train.trainer import Trainer

    trainer = Trainer(validate_config(_config()), tmp_path / "run")
    tok = trainer.tokenizer
    monkeypatch.setattr(sc, "sample_groups", _scripted_sampler(tok))
    judge = ScriptedJudge()
    trainer.strategy.judge.backend = judge  # the corrector stays the live policy (the default)
    replies = []
    policy = trainer.strategy.corrector
    real_complete = policy.complete
    policy.complete = lambda reqs: replies.extend(real_complete(reqs)) or replies[-len(reqs):]
    batches = []
    real_rollout = trainer.strategy.rollout
    trainer.strategy.rollout = lambda items, ctx: batches.append(real_rollout(items, ctx)) or batches[-1]
    try:
        for step in range(2):
            m = trainer.step()
            b = batches[-1][0]  # rollout returns (batch, metrics)
            assert len(b) == 8 and m["step_correction/failed_frac"] == 1.0 and m["step_correction/corrected_frac"] == 1.0
            assert m["step_correction/mean_k"] == pytest.approx(1.5)  # k = 1, 2, 1, 2
            assert judge.asked[-4:] == [SOLUTIONS[0], SOLUTIONS[1]] * 2
            fixed = (b.offpolicy_mask.sum(1) > 0).nonzero().flatten().tolist()
            assert len(fixed) == 4 and b.offpolicy_mask.sum() > 0
            step_replies = replies[-4:]
            sampled = [i for i in range(len(b)) if i not in fixed]
            for n, r in enumerate(fixed):
                src = sampled[n]  # corrected rows follow their group's sampled rows, in order
                sol = SOLUTIONS[n % 2]  # the n-th sampled row
                m_kept = int((b.completion_mask[r] * (1 - b.offpolicy_mask[r])).sum())
                ids = b.completion_ids[r, : int(b.lengths[r])].tolist()
                assert tok.decode(ids[:m_kept]) == KEPT[sol]  # exactly the steps before the judged error
                assert ids[:m_kept] == tok.encode(sol, add_special_tokens=False)[:m_kept]
                assert b.behaviour_logprobs[r, :m_kept].tolist() == [-0.5] * m_kept
                suffix = tok.encode(step_replies[n].text, add_special_tokens=False) + [tok.eos_token_id]
                assert ids[m_kept:] == suffix[: 40 - m_kept]  # the policy's reply, then EOS, cut at max_new_tokens
                assert b.offpolicy_mask[r, m_kept : len(ids)].tolist() == [1.0] * len(ids[m_kept:])
                assert b.offpolicy_mask[r, len(ids) :].sum() == 0 and b.behaviour_logprobs[r, m_kept:].abs().sum() == 0
                assert b.group[r] == b.group[src]
            assert b.offpolicy_mask[sampled].sum() == 0
            share = float(b.offpolicy_mask.sum() / b.completion_mask.sum())
            assert 0 < m["learn/offpolicy_frac"] <= 1 and math.isfinite(m["learn/loss"])
            assert m["learn/offpolicy_frac"] == pytest.approx(share, rel=0.35)  # per micro-batch mean vs batch share
    finally:
        trainer.close()


@pytest.mark.slow
def test_the_example_runs_two_steps_with_a_real_judge(tmp_path, monkeypatch):
    """examples/judge/step_correction_smollm2.yaml: SmolLM2-135M-Instruct writes, judges and corrects. Whatever the
    judge answers, each parsed index k in [1, #steps) yields one corrected row whose on-policy prefix is steps[:k]."""
    from covey.train.config import validate_config
    from covey.train.trainer import Trainer

    cfg = yaml.safe_load(EXAMPLE.read_text())
    cfg.update({"steps": 2, "log": {"progress": False, "report_to": ["jsonl"]}})
    trainer = Trainer(validate_config(cfg), tmp_path / "run")
    strat, tok = trainer.strategy, trainer.tokenizer
    seen = []  # (completion text, parsed k) per judged row
    real_ask = strat.judge.ask
    strat.judge.ask = lambda fields: (lambda r: seen.extend((f["completion"], v) for f, v in zip(fields, r[0])) or r)(real_ask(fields))
    batches = []
    real_rollout = strat.rollout
    strat.rollout = lambda items, ctx: batches.append(real_rollout(items, ctx)) or batches[-1]
    try:
        for _ in range(2):
            m = trainer.step()
            assert math.isfinite(m["learn/loss"]) and "step_correction/failed_frac" in m
    finally:
        trainer.close()
    expected = [sol[: sc.prefix_chars(sol, int(k))] for sol, k in seen if k is not None and 1 <= k < len(sc.split_steps(sol))]
    kept = []
    for b, _ in batches:
        for r in (b.offpolicy_mask.sum(1) > 0).nonzero().flatten().tolist():
            m_kept = int((b.completion_mask[r] * (1 - b.offpolicy_mask[r])).sum())
            kept.append(tok.decode(b.completion_ids[r, :m_kept].tolist(), skip_special_tokens=True))
    assert len(kept) == len(expected)  # one corrected row per usable index (the corrector never fails locally)
    assert all(any(e.startswith(k) and len(e) - len(k) <= 8 for e in expected) for k in kept)  # token-boundary cut
    print(f"judged {len(seen)}, parsed {sum(k is not None for _, k in seen)}, corrected {len(kept)}")
