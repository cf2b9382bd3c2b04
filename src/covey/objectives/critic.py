"""A value model trained apart from the policy: a causal LM's decoder trunk with a linear value head.

    V(x) = w . h_last(x) + b        h_last: the trunk's final (normed) hidden state at x's last token

`x` is a token sequence (a prompt, a prompt and a partial solution, or a prompt and a completion);
the critic is fitted by mean squared error to targets (Monte-Carlo success rates of partial solutions
for `direct_advantage_provisional`, rewards and offline returns for `hnpg`), with Adam and an optional
L2 penalty on its parameters. It shares the policy's tokenizer (it reads the same token ids); the trunk
is its own copy (a separate model), trained with the head unless `freeze_trunk`.

`save(path)` / `ValueCritic.load(path)` keep the base model's name and the whole state dict, so a
critic trained in one process (`scripts/direct_advantage_data.py`) is used in another.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import Tensor, nn

__all__ = ["ValueCritic"]


class ValueCritic(nn.Module):
    """V(x) from the last token's hidden state (module docstring). `base`: the model name it was built from."""

    def __init__(self, lm: nn.Module, base: str = "", *, freeze_trunk: bool = False):
        super().__init__()
        self.trunk = lm.get_decoder()
        self.head = nn.Linear(lm.config.hidden_size, 1)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)
        self.base, self.freeze_trunk = base, freeze_trunk
        self.trunk.requires_grad_(not freeze_trunk)

    @classmethod
    def from_name(cls, name: str, *, freeze_trunk: bool = False, seed: int | None = None) -> "ValueCritic":
        from covey.models import load

        lm, _ = load(name, **({"seed": seed} if seed is not None and name.startswith("tiny-") else {}))
        return cls(lm.float(), name, freeze_trunk=freeze_trunk)

    def forward(self, sequences: list[list[int]]) -> Tensor:
        """[B] values of token sequences (right-padded into one batch; empty sequences are refused)."""
        if any(len(s) == 0 for s in sequences):
            raise ValueError("ValueCritic: a sequence is empty")
        dev = self.head.weight.device
        width = max(len(s) for s in sequences)
        ids = torch.zeros(len(sequences), width, dtype=torch.long, device=dev)
        att = torch.zeros(len(sequences), width, dtype=torch.long, device=dev)
        for i, s in enumerate(sequences):
            ids[i, : len(s)] = torch.tensor(s, dtype=torch.long)
            att[i, : len(s)] = 1
        h = self.trunk(input_ids=ids, attention_mask=att).last_hidden_state  # [B, L, H]
        last = torch.tensor([len(s) - 1 for s in sequences], device=dev)
        return self.head(h[torch.arange(len(sequences), device=dev), last]).squeeze(-1).float()

    def fit(self, sequences: list[list[int]], targets: Tensor, *, steps: int = 30, lr: float = 3e-4, l2: float = 0.0,
            batch_size: int = 32, weights: Tensor | None = None, generator: torch.Generator | None = None) -> float:  # fmt: skip
        """`steps` Adam steps of squared error to `targets` [B] (+ l2 * sum of squared parameters), on random
        mini-batches of `batch_size`: the mean, or with `weights` [B] the weighted sum (renormalised to the
        mini-batch: sum_i w_i (V_i - t_i)^2 / sum_i w_i x sum(weights)); returns the last step's error
        (without the penalty)."""
        params = [p for p in self.parameters() if p.requires_grad]
        opt = torch.optim.Adam(params, lr=lr)
        dev = self.head.weight.device
        targets = targets.float().to(dev)
        w = None if weights is None else weights.float().to(dev)
        n = len(sequences)
        err = torch.zeros(())
        self.train()
        for _ in range(steps):
            idx = torch.randperm(n, generator=generator)[:batch_size].tolist() if n > batch_size else list(range(n))
            opt.zero_grad()
            sq = (self([sequences[i] for i in idx]) - targets[idx]).pow(2)
            err = sq.mean() if w is None else (sq * w[idx]).sum() / w[idx].sum() * w.sum()
            loss = err + l2 * sum(p.pow(2).sum() for p in params) if l2 else err
            loss.backward()
            opt.step()
        self.eval()
        return float(err.detach())

    @torch.no_grad()
    def values(self, sequences: list[list[int]], batch_size: int = 32) -> Tensor:
        """[B] values without gradient, in chunks."""
        self.eval()
        parts = [self(sequences[a : a + batch_size]) for a in range(0, len(sequences), batch_size)]
        return torch.cat(parts).cpu() if parts else torch.zeros(0)

    def save(self, path: str | Path) -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        torch.save({"base": self.base, "freeze_trunk": self.freeze_trunk, "state": self.state_dict()}, path)

    @classmethod
    def load(cls, path: str | Path, device: str | torch.device = "cpu") -> "ValueCritic":
        if not Path(path).is_file():
            raise ValueError(f"critic {str(path)!r} does not exist: train one first (scripts/direct_advantage_data.py)")
        saved = torch.load(path, map_location="cpu", weights_only=False)
        critic = cls.from_name(saved["base"], freeze_trunk=saved["freeze_trunk"])
        critic.load_state_dict(saved["state"])
        return critic.to(device).eval()
