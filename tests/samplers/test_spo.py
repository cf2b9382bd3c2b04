import pytest
import torch

from covey.algos.registry import ADVANTAGES
from covey.samplers.spo import SPOSampler, offline_prior, prompt_drift, spo_rho, spo_weights
from covey.rollouts import RolloutsError
from covey.train.config import validate_config
from covey.train.trainer import Trainer
from tests.samplers._helpers import ids, items, one_step, reload, same_state, scored


def test_worked_example_from_the_spec():
    a, b = offline_prior([1, 1, 1, 1, 0, 0, 0, 0])  # 4/8 -> alpha = beta = 8 * 4.5 / 9 = 4
    assert (a, b) == (4.0, 4.0)
    assert spo_rho(0.03) == 0.875  # 2^-0.5 = 0.707, clipped up to 0.875
    assert spo_rho(0.0) == 0.96 and spo_rho(0.006) == pytest.approx(2 ** -0.1)
    s = SPOSampler([{"id": 1, "off": [1, 1, 1, 1, 0, 0, 0, 0]}], offline_key="off", rho_type="constant")
    s.observe(scored([1], [1]))
    assert s.alpha.item() == 4.5 and s.beta.item() == 3.5
    assert s.alpha.item() / (s.alpha.item() + s.beta.item()) == 0.5625


def test_prior_without_scores_and_weights_floor():
    assert offline_prior([]) == (0.5, 0.5)
    w = spo_weights(torch.tensor([1.0, 5.0, 0.0]), torch.tensor([0.0, 5.0, 1.0]), 0.05)
    assert w.tolist() == pytest.approx([0.05, 0.55, 0.05])


def test_observe_writes_the_pre_update_baseline_per_row():
    s = SPOSampler(items(3), rho_type="constant")
    s.alpha[0], s.beta[0] = 3.0, 1.0
    b = scored([100, 101, 100], [1, 0, 0])
    s.observe(b)
    assert b.baseline.tolist() == [0.75, 0.5, 0.75]
    # two rows of prompt 100 in one visit: alpha = 0.875*3 + 1, beta = 0.875*1 + 1
    assert s.alpha[0].item() == pytest.approx(3.625) and s.beta[0].item() == pytest.approx(1.875)


def test_spo_advantage_by_hand():
    b = scored([1, 2, 3], [1, 0, 1])
    b.baseline = torch.tensor([0.5, 0.5, 0.75])
    raw = torch.tensor([0.5, -0.5, 0.25], dtype=torch.float64)
    want = (raw - raw.mean()) / (raw.std() + 1e-8)
    out = ADVANTAGES.get("spo").bind()(b)
    assert torch.allclose(out.advantages.double(), want, atol=1e-6)
    assert ADVANTAGES.get("spo").bind({"normalise": False})(b).advantages.tolist() == [0.5, -0.5, 0.25]


def test_spo_advantage_without_the_sampler_names_it():
    with pytest.raises(RolloutsError, match="sampler: {name: spo}"):
        ADVANTAGES.get("spo").bind()(scored([1, 2], [1, 0]))


def test_draws_are_single_stream_prioritised_and_never_fail():
    s = SPOSampler(items(4), seed=0)
    s.alpha = torch.tensor([50.0, 1.0, 50.0, 25.0], dtype=torch.float64)
    s.beta = torch.tensor([0.01, 50.0, 0.01, 25.0], dtype=torch.float64)
    got = [i for _ in range(50) for i in ids(s.next(1, 4))]
    assert got.count(103) > 25  # p=0.5 weight 0.55 vs ~0.05-0.19 for the others
    assert [d.n for d in s.next(3, 8)] == [1, 1, 1]  # n, not the run's G
    assert len(s.next(9, 4)) == 9  # more than the pool: with replacement


def test_state_round_trip_draws_the_same():
    s = SPOSampler(items(12), seed=2, candidates=6, rho_type="constant")
    for _ in range(3):
        got = ids(s.next(4, 4))
        s.observe(scored(got, [1, 0, 0, 1]))
    r = reload(s, lambda: SPOSampler(items(12), seed=2, candidates=6, rho_type="constant"))
    assert [ids(s.next(4, 4)) for _ in range(3)] == [ids(r.next(4, 4)) for _ in range(3)]


def test_one_training_step(tmp_path):
    m = one_step(tmp_path, {"name": "spo", "rho_type": "constant"}, algo={"preset": "grpo", "kl": None, "advantage": {"name": "spo"}})
    assert m["prompts/rollouts_per_prompt_mean"] == 1.0 and "adv/spo/baseline_mean" in m


# ---------------------------------------------------------------- KL-adaptive forgetting (rho_type "kl")
class ToyPolicy:
    """policy_logprobs whose answer we control: log-prob of token id t is -t/10 - scale t + shift; records calls."""

    def __init__(self, shift=0.0, scale=0.0):
        self.shift, self.scale, self.calls = shift, scale, []

    def __call__(self, prompt_ids, completion_ids, completion_mask):
        self.calls.append((len(prompt_ids), completion_ids.clone(), completion_mask.clone()))
        t = completion_ids.double()
        return (-t / 10 - self.scale * t + self.shift).float() * completion_mask


def _answer(prompt_id, success, tokens):
    b = scored([prompt_id] * len(success), success)
    width = max(map(len, tokens))
    b.completion_ids = torch.tensor([t + [0] * (width - len(t)) for t in tokens])
    b.completion_mask = torch.tensor([[1.0] * len(t) + [0.0] * (width - len(t)) for t in tokens])
    b.behaviour_logprobs = torch.zeros(len(tokens), width)
    return b


def test_kl_first_visit_uses_rho_096_and_stores_the_response_under_the_updated_policy():
    s = SPOSampler(items(2))  # rho_type "kl" is the default; prior 0.5, 0.5
    b = _answer(100, [1], [[10, 20]])
    s.observe(b)
    assert b.baseline.tolist() == [0.5] and s.alpha[0].item() == 0.5  # kl: no update in observe
    m = s.after_update(b, ToyPolicy(shift=0.0))
    assert s.alpha[0].item() == pytest.approx(0.96 * 0.5 + 1) and s.beta[0].item() == pytest.approx(0.96 * 0.5)
    assert m["sampler/spo/rho_mean"] == 0.96 and m["sampler/spo/first_visit_frac"] == 1.0
    assert s.last[0]["ids"].tolist() == [[10, 20]] and s.last[0]["logp"][0].tolist() == pytest.approx([-1.0, -2.0])
    assert s.alpha[1].item() == 0.5 and 1 not in s.last  # prompt 101 was not in the batch


def test_kl_worked_example_from_the_spec():
    """alpha = beta = 4 (offline 4/8); a correct answer with drift D = 0.03 -> rho 0.875, alpha 4.5, beta 3.5."""
    s = SPOSampler([{"id": 1, "off": [1, 1, 1, 1, 0, 0, 0, 0]}], offline_key="off")
    assert (s.alpha.item(), s.beta.item()) == (4.0, 4.0)
    # the previous visit stored tokens [10, 20, 30] (the last one padding) with log-probs -1.0, -2.0
    stored = {"prompt": torch.tensor([1, 2]), "ids": torch.tensor([[10, 20, 30]]), "logp": torch.tensor([[-1.0, -2.0, 0.0]]),
              "mask": torch.tensor([[1.0, 1.0, 0.0]])}  # fmt: skip
    s.load_state_dict({**s.state_dict(), "last": {0: stored}})
    # the updated policy gives -1.03 and -2.03 there: D = (0.03 + 0.03) / 2 = 0.03, 2^-0.5 = 0.707 -> clipped to 0.875
    policy = ToyPolicy(shift=-0.03)
    b = _answer(1, [1], [[5]])
    s.observe(b)
    m = s.after_update(b, policy)
    assert m["sampler/spo/drift_mean"] == pytest.approx(0.03) and m["sampler/spo/rho_mean"] == 0.875
    assert s.alpha.item() == pytest.approx(4.5) and s.beta.item() == pytest.approx(3.5)
    assert s.alpha.item() / (s.alpha.item() + s.beta.item()) == pytest.approx(0.5625)
    # one forward: the stored response (row 0) and this step's (row 1), padded to one width
    assert len(policy.calls) == 1
    n, ids_all, mask_all = policy.calls[0]
    assert n == 2 and ids_all.tolist() == [[10, 20, 30], [5, 0, 0]] and mask_all.tolist() == [[1, 1, 0], [1, 0, 0]]
    assert s.last[0]["ids"].tolist() == [[5]] and s.last[0]["logp"][0].tolist() == pytest.approx([-0.53])


def test_kl_drift_sets_rho_per_prompt_and_pools_tokens_of_several_responses():
    s = SPOSampler(items(3), n=2)
    first = scored([100, 100, 101, 101], [1, 0, 0, 0])
    first.completion_ids = torch.tensor([[1, 2, 3], [4, 5, 6], [7, 8, 9], [1, 1, 1]])
    first.completion_mask = torch.tensor([[1.0, 1, 1], [1, 0, 0], [1, 1, 1], [1, 1, 1]])
    s.observe(first)
    s.after_update(first, ToyPolicy(0.0))
    a100 = s.alpha[0].item()
    # second visit of 100 (101 absent, 102 new); the policy moved by 0.004 * token id: the stored tokens of 100
    # are 1, 2, 3 and 4 -> D = (0.004 + 0.008 + 0.012 + 0.016) / 4 = 0.01 (pooled; per-response would be 0.012)
    second = scored([100, 100, 102, 102], [1, 1, 0, 1])
    s.observe(second)
    m = s.after_update(second, ToyPolicy(scale=0.004))
    assert m["sampler/spo/first_visit_frac"] == 0.5
    assert m["sampler/spo/drift_mean"] == pytest.approx((0.01 + 0.0) / 2, abs=1e-7)
    assert s.alpha[0].item() == pytest.approx(2 ** (-0.01 / 0.06) * a100 + 2, rel=1e-5)  # rho = 0.891, inside the clip
    assert s.alpha[2].item() == pytest.approx(0.96 * 0.5 + 1) and s.beta[2].item() == pytest.approx(0.96 * 0.5 + 1)
    assert s.alpha[1].item() == pytest.approx(0.96 * 0.5)  # 101: updated at its visit only
    assert prompt_drift(torch.tensor([[-1.0, -1.0]]), torch.tensor([[-1.5, -9.0]]), torch.tensor([[1.0, 0.0]])) == 0.5
    assert prompt_drift(torch.zeros(1, 2), torch.ones(1, 2), torch.zeros(1, 2)) == 0.0  # no tokens: D = 0


def test_rho_type_options_are_checked():
    with pytest.raises(ValueError, match="rho_type 'kl' computes rho"):
        SPOSampler(items(2), rho_type="kl", rho=0.9)
    assert SPOSampler(items(2)).rho_type == "kl" and SPOSampler(items(2), rho=0.9).rho_type == "constant"
    with pytest.raises(ValueError, match="rho_type must be 'kl' or 'constant'"):
        SPOSampler(items(2), rho_type="fixed")
    s = SPOSampler(items(2), rho_type="constant")
    b = scored([100], [1])
    s.observe(b)
    assert s.after_update(b, ToyPolicy()) == {} and s.alpha[0].item() == pytest.approx(0.875 * 0.5 + 1)


def test_kl_state_round_trip_through_torch_save():
    make = lambda: SPOSampler(items(4), seed=1)  # noqa: E731
    s = make()
    b = _answer(101, [1, 0], [[3, 4, 5], [6]])
    s.observe(b)
    s.after_update(b, ToyPolicy(0.1))
    r = reload(s, make)
    assert same_state(s.state_dict(), r.state_dict())
    again = _answer(101, [0], [[2]])
    ms, mr = s.after_update(again, ToyPolicy(0.2)), r.after_update(again, ToyPolicy(0.2))
    assert ms == mr and torch.equal(s.alpha, r.alpha) and ms["sampler/spo/drift_mean"] == pytest.approx(0.1)


def test_kl_training_steps_store_logprobs_under_the_updated_policy(tmp_path):
    raw = dict(model={"name": "tiny-llama", "dtype": "fp32"}, task={"name": "arithmetic", "params": {"digits": 1, "n_train": 4, "n_test": 4}},
               rollout={"prompts_per_step": 4, "group_size": 1}, sampling={"max_new_tokens": 4},
               sampler={"name": "spo", "rho_type": "kl"}, algo={"preset": "grpo", "kl": None, "advantage": {"name": "spo"}},
               optim={"lr": 1e-2}, reward_workers=0, log={"progress": False, "report_to": ["jsonl"]}, steps=2)  # fmt: skip
    trainer = Trainer(validate_config(raw), tmp_path / "run")
    try:
        m1, m2 = trainer.step(), trainer.step()
        assert m1["sampler/spo/first_visit_frac"] == 1.0 and m1["sampler/spo/rho_mean"] == 0.96
        assert m2["sampler/spo/first_visit_frac"] == 0.0  # 4 prompts, 4 per step: every prompt is revisited
        assert 0.875 <= m2["sampler/spo/rho_mean"] <= 0.96 and m2["sampler/spo/drift_mean"] >= 0.0
        last = trainer.sampler.last
        assert sorted(last) == [0, 1, 2, 3]
        for s in last.values():  # stored log-probs = the current (updated) policy's
            now = trainer.policy_logprobs([s["prompt"]] * len(s["ids"]), s["ids"], s["mask"])
            assert torch.allclose(now, s["logp"], atol=1e-5)
    finally:
        trainer.close()
