"""A stateful sampler survives kill -9 + resume bit-exactly (same metrics, same weights, same state)."""

import pytest

from tests._kill_resume import kill_and_resume
from tests.samplers._helpers import same_state

CASES = {
    "vade": ({"name": "vade", "lambda_short": 0.7}, {}, {"prompts_per_step": 4, "group_size": 2}),
    # SPO's KL forgetting keeps each prompt's last response and its log-probs (tensors) in the state;
    # 6 prompts, 4 per step: prompts come back, so the resumed steps read responses stored before the kill
    # VSPO: refills of dynamic's dropped groups ranked by value; counts and the tie-break counter resume
    "vspo": ({"name": "vspo", "beta": 1.0}, {}, {"prompts_per_step": 2, "group_size": 2,
                                                "strategy": {"name": "dynamic", "max_rounds": 2}}),
    "spo_kl": ({"name": "spo", "rho_type": "kl"}, {"advantage": {"name": "spo"}}, {"prompts_per_step": 4, "group_size": 1}),
}


@pytest.mark.slow  # three CLI runs in subprocesses (~70 s on the loaded 2-core machine)
@pytest.mark.parametrize("case", sorted(CASES))
def test_resume_after_sigkill_is_exact_with_a_stateful_sampler(tmp_path, case):
    sampler, algo, rollout = CASES[case]
    cfg = {
        "model": {"name": "tiny-llama"},
        "task": {"name": "arithmetic", "params": {"digits": 1, "n_train": 24 if case == "vade" else 6, "n_test": 8}},
        "sampler": sampler,
        "rollout": rollout,
        "sampling": {"max_new_tokens": 4},
        "algo": {"preset": "grpo", "kl": None, **algo},
        "reward_workers": 0,
        "log": {"progress": False, "report_to": ["jsonl"]},
        "checkpoint": {"every": 2},
        "steps": 4,
    }
    a, wa, wb = kill_and_resume(tmp_path, cfg)
    assert any(k.startswith(f"sampler/{sampler['name']}/") for k in a[-1])
    assert same_state(wa["sampler"], wb["sampler"])
    if case == "spo_kl":
        assert a[-1]["sampler/spo/first_visit_frac"] < 1.0 and len(wa["sampler"]["last"]) > 0
