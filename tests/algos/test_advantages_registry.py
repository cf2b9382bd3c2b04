"""Every advantage estimator: registration, parameter validation, shared edge cases and invariances."""

import math

import pytest
import torch
from _make import rollouts

import covey.algos.advantages as advantages_pkg
from covey.algos import ADVANTAGES
from covey.registry import RegistryError
from covey.rollouts import RolloutsError

NAMES = [
    "grpo", "dr_grpo", "rloo", "reinforce_pp_baseline", "mc_grpo", "gdpo", "ngrpo", "dgpo", "riskpo",
    "a_grae", "ace", "xrpo", "arm", "gtpo", "drpo", "brpo",
]
SPECIAL = {"spo", "tppo", "treepo", "branch_grpo"}  # need a sampler baseline, a value head or tree paths: own test files
# objectives wave 2: extra inputs (a sampler baseline, reward columns, tree paths) -> edge cases in their own files;
# a plain scored batch is enough -> the shared edge cases below apply
SPECIAL |= {"mssr", "dagrpo_provisional", "polychromic", "trpa", "spo_tree"}
NAMES += ["disco", "hapo", "identity", "aepo_entropy", "vspo_clip_provisional"]
SPECIAL |= {"dcpo", "oblr_baseline", "spo_chain"}  # probe log-probs, sum_p2, MC cut values: own test files
SPECIAL |= {"gigpo", "hgpo", "salt", "empg"}  # multi-turn episodes: tests/algos/test_step_credit.py
SPECIAL |= {"rover"}  # batch-level success rate, not per group: tests/algos/test_surrogates_wave2.py
SPECIAL |= {"dr_mas"}  # multi-agent episodes: tests/algos/test_dr_mas.py
SPECIAL |= {"noisy_verifier"}  # binary verdicts only: tests/algos/test_advantages_noisy_verifier.py
SPECIAL |= {"seeupo", "ui_s1"}  # multi-turn episodes: tests/algos/test_seeupo_uis1.py
SPECIAL |= {"mars", "self_redteam", "portool_provisional"}  # games and tool-call trees: test_selfplay_advantages.py, test_portool.py
TOKEN_LEVEL = {"gtpo"}
HAS_SAMPLE_MASK = {"mc_grpo", "brpo"}


def full_batch(rewards, groups, lengths=None, width=5):
    """A batch with every optional field an estimator may read (ref log-probs, entropies)."""
    n = len(rewards)
    lp = [[-0.1 * (i + 1) - 0.05 * t for t in range(width)] for i in range(n)]
    ref = [[-0.2 - 0.03 * ((i * 7 + t) % 5) for t in range(width)] for i in range(n)]
    ent = [0.1 + 0.05 * (i % 4) for i in range(n)]
    ids = [[(i * 3 + t) % 4 for t in range(width)] for i in range(n)]
    return rollouts(rewards, groups=groups, lengths=lengths, width=width, logprobs=lp, ref_logprobs=ref, entropies=ent, ids=ids)


def run(name, batch, **params):
    return ADVANTAGES[name].bind(params)(batch)


def check_shapes(name, res, n, t):
    assert res.advantages.dtype == torch.float32
    assert tuple(res.advantages.shape) == ((n, t) if name in TOKEN_LEVEL else (n,))
    assert torch.isfinite(res.advantages).all()
    if name in HAS_SAMPLE_MASK:
        assert res.sample_mask.shape == (n,) and res.sample_mask.dtype == torch.float32
    else:
        assert res.sample_mask is None
    for key in ("adv/mean", "adv/std", "adv/zero_signal_groups"):
        assert math.isfinite(res.metrics[key])
    assert all(k.startswith("adv/") for k in res.metrics)


# ---------------------------------------------------------------------------- registration
def test_every_estimator_is_registered_with_paper_and_arxiv_id_and_exported():
    assert set(NAMES) | SPECIAL <= set(ADVANTAGES)
    assert sorted(advantages_pkg.__all__) == sorted(set(NAMES) | SPECIAL)
    for name in [*NAMES, *sorted(SPECIAL)]:
        comp = ADVANTAGES[name]
        assert comp.paper and comp.arxiv and comp.summary, name


@pytest.mark.parametrize("name", NAMES)
def test_every_estimator_validates_its_params(name):
    comp = ADVANTAGES[name]
    assert comp.validate_params(comp.defaults) == comp.defaults
    with pytest.raises(RegistryError, match=r"has no parameter\(s\) \['bogus'\]"):
        comp.bind({"bogus": 1})


@pytest.mark.parametrize(
    "name, params",
    [
        ("grpo", {"eps": -1.0}),
        ("grpo", {"scale": "tokens"}),
        ("grpo", {"singleton": "nan"}),
        ("mc_grpo", {"mad_eps": -0.1}),
        ("gdpo", {"whiten_by": "prompt"}),
        ("ngrpo", {"num_virtual": 0}),
        ("dgpo", {"temperature": 0.0}),
        ("riskpo", {"bundle_size": 0}),
        ("ace", {"form": "exp"}),
        ("xrpo", {"s_bar": "median"}),
        ("arm", {"low_frac": 1.5}),
        ("drpo", {"tau": 0.0}),
        ("brpo", {"compare": "ratio"}),
    ],
)
def test_bad_parameter_values_fail_at_config_time_naming_the_parameter(name, params):
    key = next(iter(params))
    with pytest.raises(RegistryError, match=f"advantage '{name}' parameter '{key}'"):
        ADVANTAGES[name].bind(params)


# ---------------------------------------------------------------------------- shared edge cases
@pytest.mark.parametrize("name", NAMES)
def test_singleton_groups_are_finite(name):
    batch = full_batch([1.0, 0.0, 0.5], groups=[4, 9, 2])
    res = run(name, batch)
    check_shapes(name, res, 3, 5)


@pytest.mark.parametrize("name", NAMES)
def test_empty_completions_and_fully_masked_rows_stay_finite(name):
    batch = full_batch([1, 0, 0, 1, 1, 0, 0.5, 0], groups=[0, 0, 0, 0, 1, 1, 1, 1], lengths=[5, 0, 3, 0, 0, 0, 0, 0])
    res = run(name, batch)
    check_shapes(name, res, 8, 5)
    if name in TOKEN_LEVEL:
        assert torch.equal(res.advantages[batch.completion_mask == 0], torch.zeros(int((batch.completion_mask == 0).sum())))


ZERO_WHEN_EQUAL = [n for n in NAMES if n not in ("ngrpo", "arm", "gtpo", "identity")]


@pytest.mark.parametrize("name", ZERO_WHEN_EQUAL)
def test_all_equal_rewards_give_zero_advantages(name):
    batch = full_batch([0.5] * 6, groups=[0, 0, 0, 1, 1, 1])
    assert torch.equal(run(name, batch).advantages, torch.zeros(6))


def test_documented_nonzero_cases_for_equal_rewards():
    batch = full_batch([0.0] * 3, groups=[0, 0, 0])
    assert (run("ngrpo", batch).advantages < 0).all()  # the virtual max reward makes all-wrong groups negative
    assert torch.equal(run("gtpo", batch, entropy_filter=False).advantages, torch.zeros(3, 5))
    assert torch.equal(run("arm", batch).advantages, torch.zeros(3))  # no correct answer -> unchanged
    assert torch.equal(run("identity", full_batch([0.5] * 3, groups=[0, 0, 0])).advantages, torch.full((3,), 0.5))
    ones = full_batch([1.0] * 3, groups=[0, 0, 0])
    assert run("arm", ones).advantages.abs().sum() > 0  # all-correct groups still get the confidence shift


@pytest.mark.parametrize("name", NAMES)
def test_nan_rewards_raise_a_clear_error(name):
    batch = full_batch([1.0, float("nan"), 0.0, 1.0], groups=[0, 0, 1, 1])
    with pytest.raises(RolloutsError, match="NaN/inf"):
        run(name, batch)


# ---------------------------------------------------------------------------- invariances
RELABEL_INVARIANT = [n for n in NAMES if n != "brpo"]  # brpo seeds its draw with the group ids


@pytest.mark.parametrize("name", RELABEL_INVARIANT)
def test_advantages_do_not_depend_on_group_id_values(name):
    r = [1, 0, 0.3, 1, 0, 0, 1, 0.5, 1]
    a = run(name, full_batch(r, groups=[0, 0, 0, 1, 1, 1, 2, 2, 2])).advantages
    b = run(name, full_batch(r, groups=[2**40, 2**40, 2**40, -7, -7, -7, 13, 13, 13])).advantages
    assert torch.allclose(a, b, atol=1e-6)


PERMUTATION_EQUIVARIANT = [n for n in NAMES if n not in ("brpo", "riskpo")]  # riskpo pairs rows by position


@pytest.mark.parametrize("name", PERMUTATION_EQUIVARIANT)
def test_shuffling_rows_shuffles_advantages(name):
    r = [1, 0, 0.3, 1, 0, 0.2, 1, 0.5, 0.9]
    g = [0, 0, 0, 1, 1, 1, 2, 2, 2]
    batch = full_batch(r, groups=g)
    perm = torch.tensor([4, 0, 8, 2, 6, 1, 3, 7, 5])
    a = run(name, batch).advantages
    b = run(name, batch.select(perm)).advantages
    assert torch.allclose(a[perm], b, atol=1e-6)


def test_estimators_declare_the_optional_fields_they_read():
    # the trainer fills ref_logprobs / entropies only when a component asks for them
    assert ADVANTAGES["ace"].requires == ("ref_logprobs",)
    assert ADVANTAGES["gtpo"].requires == ("entropies",)
    assert ADVANTAGES["aepo_entropy"].requires == ("reinforce_rows",)  # a strategy feature (covey.compat)
    assert all(ADVANTAGES[n].requires == () for n in NAMES if n not in ("ace", "gtpo", "aepo_entropy"))
