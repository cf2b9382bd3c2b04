"""The policy read out at an internal layer: BuPO's learner log-prob source for the first steps.

Paper: "Bottom-up Policy Optimization" (BuPO), arXiv 2512.19673. Status VERIFIED-CODE per covey's
objectives spec (§2.27), which read Trae1ounG/BuPO @ d3a85c698912 (`verl/workers/actor/dp_actor.py`
`_forward_micro_batch_layer_k` and the `global_steps <= iterative_steps` switch;
`verl/models/custom_model/modeling_qwen3.py` `internal_logits`; `run_code/BuPO_qwen3.sh`); the
repository was not in this session's code store.

    for step <= until_step:   logp, old_logp = log_softmax(lm_head(h_k) / T)[o_t]
                              h_k = hidden_states[k + 1], the residual stream after decoder layer k
                              (0-based; HF records it before the final norm, as the released code
                              uses it: `final_norm: false`)
    afterwards:               the usual final-layer log-probs

Rollouts still come from the full model. `InternalLayerPolicy` is a view of the policy (same
parameters) whose `get_decoder()` returns h_k, so the learner's log-prob path, prefix sharing and
fused head run unchanged; the step hook of `algo.logprob_source` (`covey.algos.hooks`) hands it to
the learner while the source is active and makes the learner recompute pi_old with it.
"""

from __future__ import annotations

import torch

__all__ = ["InternalLayerPolicy"]


class _LayerDecoder:
    """A decoder whose `last_hidden_state` is the hidden state after layer `layer` (optionally normed)."""

    def __init__(self, decoder, layer: int, final_norm: bool):
        self.decoder, self.layer, self.final_norm = decoder, layer, final_norm

    def __call__(self, **kwargs):
        out = self.decoder(**kwargs, output_hidden_states=True)
        h = out.hidden_states[self.layer + 1]
        if self.final_norm:
            h = self.decoder.norm(h)
        out["last_hidden_state"] = h
        out["hidden_states"] = None
        return out


class InternalLayerPolicy(torch.nn.Module):
    """pi_k = softmax(lm_head(h_k)): the policy read out at decoder layer `layer` (0-based)."""

    def __init__(self, policy: torch.nn.Module, layer: int, final_norm: bool = False):
        super().__init__()
        n = int(getattr(policy.config, "num_hidden_layers", 0))
        if not 0 <= layer < n:
            raise ValueError(f"algo.logprob_source.layer={layer}: the model has decoder layers 0..{n - 1}")
        self.policy, self.layer, self.final_norm = policy, layer, final_norm
        self.config = policy.config

    def get_decoder(self):
        return _LayerDecoder(self.policy.get_decoder(), self.layer, self.final_norm)

    def get_output_embeddings(self):
        return self.policy.get_output_embeddings()

    def set_attn_implementation(self, name: str) -> None:
        self.policy.set_attn_implementation(name)
