"""BuPO's learner log-prob source (`algo.logprob_source`): the internal-layer policy view, the step
switch in the trainer, and the config checks."""

import pytest
import torch

from covey.algos import resolve_algo
from covey.learner.logprobs import completion_logprobs
from covey.models import build_tiny
from covey.train.config import load_config
from covey.models.internal_layer import InternalLayerPolicy
from covey.train.trainer import Trainer


def test_spec_vector_unembedding_of_an_internal_state():
    head = torch.nn.Linear(2, 3, bias=False)
    head.weight.data = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    lp = torch.log_softmax(head(torch.tensor([1.0, -0.5])), -1)
    assert lp.tolist() == pytest.approx([-0.6041, -2.1041, -1.1041], abs=1e-4)


@pytest.mark.parametrize("share", [True, False])
@pytest.mark.parametrize("final_norm", [False, True])
def test_view_gives_the_layer_k_policy(share, final_norm):
    model, _ = build_tiny("tiny-llama", seed=3)
    model.eval()
    prompts = [torch.tensor([5, 6, 7]), torch.tensor([5, 6, 7]), torch.tensor([9, 4])]
    comp = torch.tensor([[11, 12, 13], [14, 15, 0], [16, 17, 18]])
    mask = torch.tensor([[1.0, 1, 1], [1, 1, 0], [1, 1, 1]])
    view = InternalLayerPolicy(model, 0, final_norm=final_norm)
    with torch.no_grad():
        got, _ = completion_logprobs(view, prompts, comp, mask, temperature=0.7, share_prompts=share)
        for i, p in enumerate(prompts):
            ids = torch.cat([p, comp[i]])[None]
            h = model.get_decoder()(input_ids=ids, output_hidden_states=True).hidden_states[1]
            h = model.get_decoder().norm(h) if final_norm else h
            lp = torch.log_softmax(model.get_output_embeddings()(h[0]) / 0.7, -1)
            for t in range(int(mask[i].sum())):
                assert float(got[i, t]) == pytest.approx(float(lp[len(p) - 1 + t, comp[i, t]]), abs=1e-4)
        full, _ = completion_logprobs(model, prompts, comp, mask, temperature=0.7)
    assert not torch.allclose(got * mask, full * mask, atol=1e-3)  # not the final layer's policy
    assert list(view.parameters())[0] is list(model.parameters())[0]  # a view: the same parameters


def test_layer_out_of_range_and_correction_are_refused():
    model, _ = build_tiny("tiny-llama", seed=3)
    with pytest.raises(ValueError, match="decoder layers 0.."):
        InternalLayerPolicy(model, model.config.num_hidden_layers)
    with pytest.raises(ValueError, match="importance correction"):
        resolve_algo({"logprob_source": {"layer": 1, "until_step": 3}, "correction": {"name": "tis"}})


def test_a_kl_loss_against_the_full_model_reference_is_refused():
    # pi_k (layer 1) against the full model's pi_ref would compare different policies; the released code's
    # reference has no internal layer and its script runs without KL
    with pytest.raises(ValueError, match=r"algo.kl \(mode loss, coef 0.04\) compares"):
        resolve_algo({"preset": "grpo", "logprob_source": {"layer": 1, "until_step": 3}})
    with pytest.raises(ValueError, match="algo.surrogate 'trpa'"):
        resolve_algo({"preset": "grpo", "kl": None, "surrogate": {"name": "trpa"}, "logprob_source": {"layer": 1, "until_step": 3}})
    resolve_algo({"preset": "grpo", "kl": None, "logprob_source": {"layer": 1, "until_step": 3}})  # BuPO's script: no KL
    resolve_algo({"preset": "grpo", "kl": {"coef": 0.04, "mode": "reward"}, "logprob_source": {"layer": 1, "until_step": 3}})


def test_trainer_switches_back_to_the_full_model_after_until_step(tmp_path):
    cfg = load_config(None, [
        "model.name=tiny-llama", "task.name=arithmetic", "task.params={digits: 1, n_train: 16, n_test: 4}",
        "rollout.prompts_per_step=2", "rollout.group_size=2", "sampling.max_new_tokens=6", "reward_workers=0",
        "log.progress=false", "log.tensorboard=false", "algo.kl=null", "steps=2", f"log.dir={tmp_path}",
        "algo.logprob_source={layer: 0, until_step: 1}", "algo.entropy_coef=0.01",
    ])  # fmt: skip
    tr = Trainer(cfg, tmp_path / "run")
    seen = []
    fill = tr.learner.fill_logprobs

    def spy(batch, model=None, field="old_logprobs", **kw):
        seen.append(type(model or tr.learner.model).__name__)
        return fill(batch, model=model, field=field, **kw)

    tr.learner.fill_logprobs = spy
    m1 = tr.step()
    assert m1["learn/internal_layer"] == 0.0 and tr.learner.model is tr.model and seen == ["InternalLayerPolicy"]
    m2 = tr.step()
    assert m2["learn/internal_layer"] == -1.0 and seen == ["InternalLayerPolicy"]  # step 2: behaviour log-probs as pi_old
    assert m1["learn/entropy"] > 0 and m2["learn/entropy"] > 0
