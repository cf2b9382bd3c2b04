"""build_optimizer: the fused AdamW it returns makes the same updates as torch's reference AdamW loop."""

import torch

from covey.train.config import OptimConfig
from covey.learner.optim import build_optimizer


def test_build_optimizer_updates_match_reference_adamw():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(40, 30), torch.nn.Linear(30, 7))
    ref = [p.detach().clone().requires_grad_() for p in model.parameters()]
    cfg = OptimConfig(lr=1e-2, weight_decay=0.1, betas=(0.8, 0.95))
    opt, sched = build_optimizer(model, cfg, total_steps=5)
    ref_opt = torch.optim.AdamW(ref, lr=1e-2, weight_decay=0.1, betas=(0.8, 0.95), foreach=False)
    gen = torch.Generator().manual_seed(1)
    for _ in range(5):
        for p, q in zip(model.parameters(), ref):
            p.grad = torch.randn(p.shape, generator=gen)
            q.grad = p.grad.clone()
        opt.step()
        sched.step()
        ref_opt.step()
    moved = max(float((p.detach() - q0).abs().max()) for p, q0 in zip(model.parameters(), [r.detach() for r in ref]))
    assert moved < 1e-6  # same update up to float rounding (fused kernel vs per-tensor loop)
    assert opt.param_groups[0]["fused"] is True
