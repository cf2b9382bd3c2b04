"""Import-path components: wrong signatures fail when the config is read, wrong return values name
the component and what it must return, and the `group_relative` flag matches what estimators do."""

from __future__ import annotations

import sys
import textwrap

import pytest
import torch

from _make import rollouts
from covey.algos import ADVANTAGES, AGGREGATIONS, CORRECTIONS, KL_ESTIMATORS, SURROGATES
from covey.registry import RegistryError
from covey.algos.registry import AdvantageResult, BatchTotals, CorrectionInputs, LossInputs
from covey.rollouts import RolloutsError

USER_MODULE = '''
from __future__ import annotations
from typing import TYPE_CHECKING
import torch
from covey.algos.registry import AdvantageResult
if TYPE_CHECKING:
    from somewhere_else import Scale      # never importable at run time

def adv_no_batch():
    return None
def adv_two_inputs(batch, extra):
    return None
def adv_param_without_default(batch, *, scale):
    return None
def adv_forward_ref(batch, *, scale: Scale = None):
    r = batch.scalar_rewards()
    return AdvantageResult(r - r.mean(), {})
def adv_ok(batch, *, scale: float = 1.0):
    r = batch.scalar_rewards()
    return AdvantageResult(scale * (r - r.mean()), {"mean": float(r.mean())})
adv_ok.group_relative = True   # like register_advantage(..., group_relative=True)
def adv_tensor(batch):
    return batch.scalar_rewards()
def adv_wrong_rows(batch):
    return AdvantageResult(batch.scalar_rewards()[:1], {})
def adv_wrong_mask(batch):
    r = batch.scalar_rewards()
    return AdvantageResult(r, {}, sample_mask=torch.ones(len(r) + 1))
def adv_metrics_list(batch):
    return AdvantageResult(batch.scalar_rewards(), [1.0])
def sur_three(logp, old_logp, advantages):
    return None
def sur_tensor_only(inp):
    return -(inp.logp * inp.advantages)
def sur_wrong_shape(inp):
    return (inp.logp.sum(-1), {})
def sur_ok(inp, *, scale: float = 1.0):
    return (-(scale * inp.logp * inp.advantages), {})
def agg_vector(loss_tok, mask, totals):
    return (loss_tok * mask).sum(-1), {}
def kl_two_inputs(logp, ref_logp):
    return logp - ref_logp, {}
def kl_row(logp, ref_logp, mask):
    return (logp - ref_logp).sum(-1), {}
def kl_tensor_only(logp, ref_logp, mask):
    return logp - ref_logp
def agg_no_metrics(loss_tok, mask, totals):
    return (loss_tok * mask).sum()
def corr_bad(inp):
    return (inp.mask[:, :1], {})
'''


@pytest.fixture(scope="module")
def um(tmp_path_factory):
    d = tmp_path_factory.mktemp("user_components")
    (d / "user_components.py").write_text(textwrap.dedent(USER_MODULE))
    sys.path.insert(0, str(d))
    yield "user_components"
    sys.path.remove(str(d))
    sys.modules.pop("user_components", None)


@pytest.mark.parametrize(
    "registry, fn, message",
    [
        (ADVANTAGES, "adv_no_batch", r"signature \(\), but a advantage is called as fn\(batch: Rollouts"),
        (ADVANTAGES, "adv_two_inputs", r"takes 1 positional input"),
        (ADVANTAGES, "adv_param_without_default", r"parameter 'scale' needs a default"),
        (SURROGATES, "sur_three", r"surrogate 'user_components:sur_three' has signature \(logp, old_logp, advantages\)"),
        (KL_ESTIMATORS, "kl_two_inputs", r"takes 3 positional input\(s\) \(logp, ref_logp, mask\)"),
    ],
)
def test_wrong_signature_is_a_component_error_at_lookup(um, registry, fn, message):
    with pytest.raises(RegistryError, match=message):
        registry.get(f"{um}:{fn}")


def test_unresolvable_annotation_is_not_a_crash(um):
    c = ADVANTAGES.get(f"{um}:adv_forward_ref")  # `Scale` exists only for type checkers
    assert c.defaults == {"scale": None}


def test_good_component_params_are_validated_and_finite(um):
    c = ADVANTAGES.get(f"{um}:adv_ok")
    assert c.defaults == {"scale": 1.0} and c.group_relative
    assert not ADVANTAGES.get(f"{um}:adv_tensor").group_relative
    with pytest.raises(RegistryError, match=r"parameter 'scale'.*finite"):
        c.bind({"scale": float("nan")})
    out = c.bind({"scale": 2.0})(rollouts([1.0, 0.0, 0.0, 1.0], [0, 0, 1, 1]))
    assert torch.equal(out.advantages, torch.tensor([1.0, -1.0, -1.0, 1.0]))


@pytest.mark.parametrize(
    "fn, message",
    [
        ("adv_tensor", r"returned a Tensor; it must return AdvantageResult"),
        ("adv_wrong_rows", r"returned advantages of shape \(1,\) for a batch of 4 rows x 4 tokens"),
        ("adv_wrong_mask", r"returned sample_mask of shape \(5,\) \(expected \(4,\)"),
        ("adv_metrics_list", r"returned metrics of type list"),
    ],
)
def test_advantage_returning_the_wrong_thing_is_named(um, fn, message):
    bound = ADVANTAGES.get(f"{um}:{fn}").bind({})
    with pytest.raises(RegistryError, match=rf"advantage '{um}:{fn}' {message}"):
        bound(rollouts([1.0, 0.0, 0.0, 1.0], [0, 0, 1, 1]))


def _loss_inputs(n=3, t=5) -> LossInputs:
    logp = -torch.rand(n, t)
    return LossInputs(logp=logp, old_logp=logp.clone(), advantages=torch.ones(n, t), mask=torch.ones(n, t))


@pytest.mark.parametrize(
    "registry, fn, args, message",
    [
        (SURROGATES, "sur_tensor_only", lambda: (_loss_inputs(),), r"returned a Tensor; it must return \(loss_tok \[N,T\]"),
        (SURROGATES, "sur_wrong_shape", lambda: (_loss_inputs(),), r"returned loss_tok of shape \(3,\) \(expected \(3, 5\)\)"),
        (AGGREGATIONS, "agg_vector", lambda: (torch.ones(3, 5), torch.ones(3, 5), None), r"returned a loss of shape \(3,\)"),
        (AGGREGATIONS, "agg_no_metrics", lambda: (torch.ones(3, 5), torch.ones(3, 5), None),
         r"returned a Tensor of shape \(\); it must return \(a scalar \(0-dim\) tensor, metrics dict\)"),
        (KL_ESTIMATORS, "kl_row", lambda: (torch.zeros(3, 5), torch.zeros(3, 5), torch.ones(3, 5)),
         r"returned kl_tok of shape \(3,\) \(expected \(3, 5\)\)"),
        (KL_ESTIMATORS, "kl_tensor_only", lambda: (torch.zeros(3, 5), torch.zeros(3, 5), torch.ones(3, 5)),
         r"returned a Tensor; it must return \(kl_tok \[N,T\] tensor, metrics dict\)"),
        (CORRECTIONS, "corr_bad", lambda: (CorrectionInputs(torch.zeros(3, 5), torch.zeros(3, 5), torch.ones(3, 5)),),
         r"returned weight_tok of shape \(3, 1\) \(expected \(3, 5\)\)"),
    ],
)  # fmt: skip
def test_other_axes_returning_the_wrong_thing_are_named(um, registry, fn, args, message):
    with pytest.raises(RegistryError, match=rf"{registry.kind} '{um}:{fn}' {message}"):
        registry.get(f"{um}:{fn}").bind({})(*args())


def test_good_surrogate_passes_through(um):
    loss, metrics = SURROGATES.get(f"{um}:sur_ok").bind({"scale": 0.5})(inp := _loss_inputs())
    assert torch.equal(loss, -(0.5 * inp.logp)) and metrics == {}


def test_builtin_components_pass_their_return_checks():
    batch = rollouts([1.0, 0.0, 0.5, 0.0, 1.0, 1.0], [0, 0, 0, 1, 1, 1], logprobs=-1.0, entropies=1.0, ref_logprobs=-1.2)
    ran = []
    for name in ADVANTAGES:
        try:
            out = ADVANTAGES[name].bind({})(batch)
        except RolloutsError:  # needs inputs a plain batch lacks (a sampler's baseline, tree paths)
            continue
        assert isinstance(out, AdvantageResult), name
        ran.append(name)
    assert {"grpo", "rloo", "gtpo", "drpo"} <= set(ran)
    inp = _loss_inputs()
    n = inp.mask.shape[0]
    for name in SURROGATES:  # the learner passes what a surrogate requires: entropy, statistics, groups, row values
        needs = SURROGATES[name].requires
        full = LossInputs(inp.logp, inp.old_logp, inp.advantages, inp.mask, torch.rand_like(inp.logp) if "entropies" in needs else None,
                          stats={k[5:]: -torch.rand_like(inp.logp) for k in needs if k.startswith("stat:")},
                          group=torch.zeros(n, dtype=torch.long) if "group" in needs else None,
                          row={"reward": torch.rand(n), "group_mean": torch.rand(n), "group_std": torch.rand(n),
                               "col:level": torch.tensor([1.0, 2.0, 2.0])},
                          ref_logp=inp.logp - 0.1 if "ref_logprobs" in needs else None)  # fmt: skip
        SURROGATES[name].bind({})(full)
    for name in KL_ESTIMATORS:
        _, metrics = KL_ESTIMATORS[name].bind({})(inp.logp, inp.old_logp - 0.1, inp.mask)
        assert metrics["kl/mean"] > 0, name
    for name in AGGREGATIONS:
        AGGREGATIONS[name].bind({})(inp.logp, inp.mask, BatchTotals(15.0, 3.0, 5))


def _singleton_groups():
    """Six prompts, one completion each, with different rewards: only a group-free baseline moves."""
    return rollouts([1.0, 0.0, 1.0, 0.0, 0.5, 1.0], [0, 1, 2, 3, 4, 5], logprobs=[-1, -2, -0.5, -1, -3, -0.2],
                    entropies=[1, 2, 1, 2, 1, 1], ref_logprobs=[-1.1, -2, -0.4, -1, -3, -0.3])  # fmt: skip


@pytest.mark.parametrize("name", sorted(ADVANTAGES))
def test_group_relative_flag_matches_zero_advantages_for_groups_of_one(name):
    c = ADVANTAGES[name]
    try:
        out = c.bind({})(_singleton_groups())
    except RolloutsError as e:
        pytest.skip(f"needs more than a plain scored batch: {e}")
    all_zero = bool((out.advantages == 0).all())
    assert c.group_relative == all_zero, f"{name}: group_relative={c.group_relative} but all-zero={all_zero}"
