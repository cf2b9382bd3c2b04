"""`step_correction` (SCOPE): step splitting, the kept-token layout, masks and rewards with a fake judge
and corrector, LUFFY's shaped loss on corrector tokens, and two real steps on tiny-llama."""

import math

import pytest
import torch

import covey.strategies.step_correction as sc
from covey.algos.surrogates import offpolicy_shaped_loss
from covey.rewards.judge.backends import JudgeReply
from covey.rollouts import Rollouts, RolloutsError
from covey.strategies import STRATEGIES
from covey.strategies.base import RolloutContext
from covey.strategies.step_correction import kept_tokens, prefix_chars, split_steps
from tests.strategies._fake_engine import CharTok


# ------------------------------------------------------------------ pure helpers
def test_split_steps_and_prefix_chars_by_hand():
    t = "Step one.\n\nStep two.\n \n\nStep three."
    assert split_steps(t) == ["Step one.", "Step two.", "Step three."]
    assert [t[: prefix_chars(t, k)] for k in range(4)] == ["", "Step one.\n\n", "Step one.\n\nStep two.\n \n\n", t]
    assert split_steps("\n\nonly\n\n") == ["only"] and prefix_chars("\n\nonly\n\n", 0) == 2
    assert split_steps("a\nb") == ["a\nb"]  # a single newline does not split


def test_kept_tokens_stops_before_a_token_that_crosses_the_cut():
    pieces = {1: "x\n", 2: "\ny", 3: "\n\n", 4: "z"}
    decode = lambda ids: "".join(pieces[i] for i in ids)  # noqa: E731
    assert kept_tokens(decode, [1, 2, 3, 4], "x\n\ny\n\n") == 3  # "x\n" "\ny" "\n\n"
    assert kept_tokens(decode, [1, 2, 3, 4], "x\n\n") == 1  # "\ny" crosses the cut: only "x\n" is kept
    assert kept_tokens(decode, [4], "x") == 0


# ------------------------------------------------------------------ fakes
class FakeJudge:
    """Answers the first-error judge from a table keyed by the solution text in the prompt."""

    fingerprint = "fake-judge"

    def __init__(self, table):
        self.table, self.seen = table, []

    def complete(self, requests):
        out = []
        for r in requests:
            text = r.messages[-1][1]
            self.seen.append(text)
            hit = [v for k, v in self.table.items() if f"[AI Solution]\n\n{k}\n\n" in text]
            out.append(JudgeReply(text=hit[0] if hit else "no idea"))
        return out


class FakeCorrector:
    fingerprint = "fake-corrector"

    def __init__(self, suffixes):
        self.suffixes, self.prompts = suffixes, []

    def complete(self, requests):
        self.prompts += [r.messages[-1][1] for r in requests]
        return [JudgeReply(text=self.suffixes[len(self.prompts) - len(requests) + j]) for j in range(len(requests))]


TEXTS = ["a\n\nb\n\nans=4", "x\n\ny\n\nans=5", "p\n\nq", "u\n\nv", "m\n\nn\n\nans=3"]
GROUPS = [0, 0, 0, 0, 1]


def _batch(tok):
    n, t = len(TEXTS), max(len(s) + 1 for s in TEXTS)
    ids, mask = torch.zeros(n, t, dtype=torch.long), torch.zeros(n, t)
    lp = torch.zeros(n, t)
    for r, s in enumerate(TEXTS):
        row = tok.encode(s) + [2]
        ids[r, : len(row)] = torch.tensor(row)
        mask[r, : len(row)] = 1.0
        lp[r, : len(row)] = -0.01 * (r + 1) * torch.arange(1, len(row) + 1)
    items = [{"id": 7, "prompt": "2+2?", "answer": "4"}, {"id": 8, "prompt": "3+4?", "answer": "7"}]
    return Rollouts(prompt_ids=[torch.tensor([5, 6]) for _ in range(n)], completion_ids=ids, completion_mask=mask,
                    behaviour_logprobs=lp, group=torch.tensor(GROUPS), prompt_id=torch.tensor([7 + g for g in GROUPS]),
                    finish_reason=["stop"] * n, items=[items[g] for g in GROUPS]).validate()


def _score(tok):
    def score(batch):
        texts = [tok.decode(r[: int(n)].tolist()) for r, n in zip(batch.completion_ids, batch.lengths)]
        ok = [1.0 if s.endswith("ans=" + it["answer"]) else 0.0 for s, it in zip(texts, batch.items)]
        batch.rewards, batch.reward_names = torch.tensor(ok)[:, None], ("accuracy",)
        return {"reward/accuracy": sum(ok) / len(ok)}

    return score


def _run(monkeypatch, table, suffixes, max_new=64, **params):
    tok = CharTok()
    monkeypatch.setattr(sc, "sample_groups", lambda engine, tokenizer, draws, sampling: _batch(tok))
    judge, corrector = FakeJudge(table), FakeCorrector(suffixes)
    strat = STRATEGIES.build("step_correction", {"judge": judge, "corrector": corrector, **params})
    sampling = type("S", (), {"max_new_tokens": max_new})()
    ctx = RolloutContext(engine=object(), tokenizer=tok, draws=[], sampling=lambda r: sampling, score=_score(tok),
                         draw=lambda k: [], policy_version=3)
    batch, m = strat.rollout([], ctx)
    return batch, m, judge, corrector, tok


TABLE = {"x\n\ny\n\nans=5": r"\boxed{2}", "p\n\nq": r"\boxed{0}", "u\n\nv": r"\boxed{-1}", "m\n\nn\n\nans=3": r"\boxed{1}"}


def test_corrected_rows_layout_masks_rewards_and_metrics(monkeypatch):
    batch, m, judge, corrector, tok = _run(monkeypatch, TABLE, ["ans=4", "ans=8"])
    assert len(judge.seen) == 4  # only the failed rows are judged
    # rows: group 0 = 4 sampled + x's correction, group 1 = m's row + its correction
    assert batch.group.tolist() == [0, 0, 0, 0, 0, 1, 1]
    fixed, still = 4, 6
    assert tok.decode(batch.completion_ids[fixed].tolist()) == "x\n\ny\n\nans=4"
    assert tok.decode(batch.completion_ids[still].tolist()) == "m\n\nans=8"
    assert batch.completion_mask[fixed].sum() == 6 + 5 + 1  # kept "x\n\ny\n\n", "ans=4", eos
    assert batch.offpolicy_mask[fixed].tolist() == [0.0] * 6 + [1.0] * 6  # T = 12
    assert batch.offpolicy_mask[still].tolist()[:10] == [0.0] * 3 + [1.0] * 6 + [0.0]
    assert batch.offpolicy_mask[:4].sum() == 0 and batch.offpolicy_mask[5].sum() == 0
    # kept tokens carry their behaviour log-probs (row 1: -0.02 t), corrector tokens 0
    assert batch.behaviour_logprobs[fixed, :6].tolist() == pytest.approx([-0.02 * t for t in range(1, 7)])
    assert batch.behaviour_logprobs[fixed, 6:].abs().sum() == 0
    assert batch.policy_version is None
    assert batch.rewards[:, 0].tolist() == [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0]  # the still-wrong one keeps 0
    assert m["step_correction/failed_frac"] == pytest.approx(4 / 5)
    assert m["step_correction/corrected_frac"] == pytest.approx(2 / 4)
    assert m["step_correction/mean_k"] == pytest.approx((2 + 0 - 1 + 1) / 4)
    assert m["step_correction/corrected_success_rate"] == pytest.approx(0.5)
    assert m["step_correction/sampled_success"] == pytest.approx(1 / 5)
    assert m["reward/accuracy"] == pytest.approx(1 / 5)  # the reward metrics are the sampled rows
    # the corrector saw the kept steps and the reference answer as a hint
    assert "[Partial Solution]\n\nx\n\ny\n\n" in corrector.prompts[0] and "[Reference Answer]\n\n4" in corrector.prompts[0]


def test_no_hint_unreadable_judge_and_the_length_cap(monkeypatch):
    table = {"x\n\ny\n\nans=5": r"\boxed{2}", "m\n\nn\n\nans=3": "step 1 I think"}
    batch, m, _, corrector, tok = _run(monkeypatch, table, ["ans=4 and more words"], max_new=10, hint_column=None)
    assert "[Reference Answer]" not in corrector.prompts[0]
    assert len(batch) == 6 and m["step_correction/judge_unreadable_frac"] == pytest.approx(3 / 4)
    row = batch.completion_ids[4]
    assert batch.completion_mask[4].sum() == 10 and tok.decode(row.tolist()) == "x\n\ny\n\nans="
    assert batch.finish_reason[4] == "length" and batch.rewards[4, 0] == 0.0


def test_a_failed_corrector_reply_adds_no_row(monkeypatch):
    class Failing(FakeCorrector):
        def complete(self, requests):
            return [JudgeReply(error="prompt too long")] + super().complete(requests[1:])

    tok = CharTok()
    monkeypatch.setattr(sc, "sample_groups", lambda engine, tokenizer, draws, sampling: _batch(tok))
    strat = STRATEGIES.build("step_correction", {"judge": FakeJudge(TABLE), "corrector": Failing(["ans=7"])})
    sampling = type("S", (), {"max_new_tokens": 64})()
    ctx = RolloutContext(engine=object(), tokenizer=tok, draws=[], sampling=lambda r: sampling, score=_score(tok),
                         draw=lambda k: [], policy_version=0)
    batch, m = strat.rollout([], ctx)
    assert len(batch) == 6 and m["step_correction/corrector_failures"] == 1.0
    assert m["step_correction/corrected_frac"] == pytest.approx(1 / 4) and m["step_correction/corrected_success_rate"] == 1.0
    assert tok.decode(batch.completion_ids[-1].tolist()) == "m\n\nans=7"


def test_nothing_to_salvage_returns_the_group_with_a_zero_mask(monkeypatch):
    batch, m, _, corrector, _ = _run(monkeypatch, {"x\n\ny\n\nans=5": r"\boxed{7}"}, [])  # k past the last step
    assert len(batch) == 5 and batch.offpolicy_mask.sum() == 0 and not corrector.prompts
    assert m["step_correction/corrected_frac"] == 0.0


def test_inside_dynamic_the_rounds_join_with_their_masks(monkeypatch):
    tok = CharTok()
    monkeypatch.setattr(sc, "sample_groups", lambda engine, tokenizer, draws, sampling: _batch(tok))
    inner = {"judge": FakeJudge(TABLE), "corrector": FakeCorrector(["ans=4", "ans=8"] * 4)}
    strat = STRATEGIES.build("dynamic", {"inner": "step_correction", "inner_params": inner, "max_rounds": 3})
    sampling = type("S", (), {"max_new_tokens": 64})()
    ctx = RolloutContext(engine=object(), tokenizer=tok, draws=[], sampling=lambda r: sampling, score=_score(tok),
                         draw=lambda k: [], policy_version=0)
    batch, m = strat.rollout([{}, {}], ctx)  # want 2 groups; each round keeps group 0 (group 1 is all wrong)
    assert m["filter/gen_batches"] == 2 and len(batch) == 10
    assert batch.offpolicy_mask.sum() == 2 * 6 and batch.group.tolist() == [0] * 5 + [2] * 5


def test_bad_parameters():
    with pytest.raises(ValueError, match="boxed_int"):
        STRATEGIES.build("step_correction", {"judge": FakeJudge({}), "judge_parser": "yes_no"})
    with pytest.raises(ValueError, match="corrector_max_new_tokens"):
        STRATEGIES.build("step_correction", {"judge": FakeJudge({}), "corrector_max_new_tokens": 0})


# ------------------------------------------------------------------ the learner's side
def test_offpolicy_shaped_loss_by_hand():
    logp = torch.tensor([[math.log(0.3), math.log(0.5)]], requires_grad=True)
    adv = torch.tensor([[2.0, 2.0]])
    base = torch.tensor([[9.0, 9.0]])
    loss = offpolicy_shaped_loss(base, logp, adv, torch.tensor([[1.0, 0.0]]), gamma=0.1)
    assert loss.tolist()[0] == pytest.approx([-2 * 0.3 / 0.4, 9.0])
    loss.sum().backward()
    assert logp.grad.tolist()[0] == pytest.approx([-2 * 0.3 * 0.1 / 0.4**2, 0.0])  # -A p g / (p + g)^2, no clip


def test_offpolicy_mask_is_validated():
    b = Rollouts(prompt_ids=[torch.tensor([1])], completion_ids=torch.ones(1, 3, dtype=torch.long),
                 completion_mask=torch.tensor([[1.0, 1.0, 0.0]]), behaviour_logprobs=torch.zeros(1, 3),
                 group=torch.tensor([0]), prompt_id=torch.tensor([0]), offpolicy_mask=torch.tensor([[0.0, 1.0, 1.0]]))
    with pytest.raises(RolloutsError, match="offpolicy_mask"):
        b.validate()
    b.offpolicy_mask = torch.tensor([[0.0, 1.0, 0.0]])
    assert b.validate().select([0]).offpolicy_mask.tolist() == [[0.0, 1.0, 0.0]]


# ------------------------------------------------------------------ real steps on tiny-llama
def _config(strategy):
    return {
        "model": {"name": "tiny-llama"},
        "task": {"name": "arithmetic", "params": {"digits": 1, "n_train": 8, "n_test": 4}},
        "rollout": {"prompts_per_step": 2, "group_size": 2, "strategy": strategy},
        "sampling": {"max_new_tokens": 12},
        "algo": {"preset": "grpo", "kl": None},
        "reward_workers": 0,
        "log": {"progress": False, "report_to": ["jsonl"]},
        "steps": 2,
    }


class BlankLineJudge:
    """Says step 1 is the first wrong one of every solution (so any 2-step failure is corrected)."""

    fingerprint = "always-1"

    def complete(self, requests):
        return [JudgeReply(text=r"\boxed{1}") for _ in requests]


@pytest.mark.slow
def test_two_steps_from_config_with_a_tiny_local_judge(tmp_path):
    from covey.train.config import validate_config
    from covey.train.trainer import Trainer

    strategy = {"name": "step_correction", "judge": {"kind": "local", "model": "tiny-llama"}, "judge_max_new_tokens": 8,
                "corrector_max_new_tokens": 4}  # fmt: skip
    trainer = Trainer(validate_config(_config(strategy)), tmp_path / "run")
    try:
        for _ in range(2):
            m = trainer.step()
            assert "step_correction/failed_frac" in m and math.isfinite(m["learn/loss"])
    finally:
        trainer.close()


@pytest.mark.slow
def test_two_steps_train_on_corrected_rows(tmp_path, monkeypatch):
    """Judge and corrector replaced by fakes after the build: every failed row with two or more steps is corrected, and
    the learner's shaped loss runs on the corrector's tokens."""
    from covey.train.config import validate_config
    from covey.train.trainer import Trainer

    real = sc.completion_texts
    monkeypatch.setattr(sc, "completion_texts", lambda tok, batch: [t + "\n\nstep" for t in real(tok, batch)])
    monkeypatch.setattr(sc, "kept_tokens", lambda decode, ids, cut: min(2, len(ids)))  # keep 2 sampled tokens
    strategy = {"name": "step_correction", "judge": {"kind": "local", "model": "tiny-llama"}}
    trainer = Trainer(validate_config(_config(strategy)), tmp_path / "run")
    trainer.strategy.judge.backend = BlankLineJudge()
    trainer.strategy.corrector = FakeCorrector(["The answer is 3"] * 64)
    try:
        corrected = 0
        for _ in range(2):
            m = trainer.step()
            if m["step_correction/failed_frac"] > 0:
                assert m["step_correction/corrected_frac"] == 1.0 and m["learn/offpolicy_frac"] > 0
                corrected += 1
            assert math.isfinite(m["learn/loss"])
        assert corrected > 0  # the random tiny model fails arithmetic
    finally:
        trainer.close()


def test_docstring_examples_pass():
    import doctest

    result = doctest.testmod(sc)
    assert result.attempted > 0 and result.failed == 0
