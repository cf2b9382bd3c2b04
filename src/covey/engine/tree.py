"""Tree decoding on the engine's KV cache: rows that continue, fork and stop independently.

`TreeDecoder` keeps one KV cache (`covey.engine.forward.KVCache`) alive across calls, so a rollout
strategy can decode a segment, look at the rows, then

    fork(index)   copy rows (their cache columns, next-token logits and tokens so far) instead of
                  recomputing the shared prefix: children of one node share its prefix for free;
    add(rows)     start rows from prompt + a prefix of earlier tokens (a prefill: resuming a carried
                  partial completion, or TreePO's fallback from a cut point);
    step()/decode(k)  sample (or force) one token per row, k times; rows that stop leave the batch.

Layout: rows are left-padded so every row writes the same cache column at a step (`valid` marks
real columns, each row has its own position); a row added later is prefilled left-padded to the
current column. The cache grows (rows or columns) when a fork or a long row needs it. Every row
holds its next-token logits, so a fork costs a cache copy and no forward pass, and the forward
passes equal the tokens decoded (`decoded`), plus `prefilled` tokens for added rows.

Sampling is the engine's (`covey.engine.sampling.sample_tokens`: tempered full-distribution
log-probs); uniforms come from one `torch.Generator` seeded by `SamplingParams.seed`, one per
(row, step) in row order, so a run is reproducible.

This is the torch engine's `TreeSession` (`covey.engine.base`): strategies open one with
`engine.tree_session(sampling)` (`ForkingEngine`) and use only that protocol's members (`rows`,
`logits`, `stop_ids`, `decoded`, `prefilled`, `add`, `fork`, `step`, `decode`, `take`). Used by the
`treepo`, `branch`, `latr`, `april`, `arrol` and `tppo` rollout strategies (`covey.strategies`).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from covey.engine.base import Row, SamplingParams
from covey.engine.forward import KVCache, decode_step, new_cache, prefill
from covey.engine.sampling import sample_tokens, validate_sampling

__all__ = ["TreeDecoder"]


class TreeDecoder:
    """Incremental decoding over a `TorchEngine`'s weights (see the module docstring); the
    `covey.engine.base.TreeSession` that `TorchEngine.tree_session` opens.

    engine:    a `TorchEngine`; its public `weights`, `dtype`, `version`, `pad_token_id`, `eos_ids`,
               `max_positions` and `stop_strings(...)` are used.
    sampling:  temperature / truncation / stops; `max_new_tokens` caps each row's completion.
    """

    def __init__(self, engine, sampling: SamplingParams):
        sp = sampling
        validate_sampling(sp.temperature, sp.top_p, sp.top_k, sp.min_p, sp.max_new_tokens)
        self.engine, self.sp, self.w, self.dtype = engine, sp, engine.weights, engine.dtype
        self.device = self.w.embed.device
        self.version = int(engine.version)
        stop_ids = sorted(set(sp.stop_token_ids) | (set() if sp.ignore_eos else set(engine.eos_ids)))
        self.stop_ids = torch.tensor(stop_ids, dtype=torch.long, device=self.device)
        self.stops = engine.stop_strings(tuple(sp.stop_strings)) if sp.stop_strings else None
        self.gen = torch.Generator().manual_seed(sp.seed if sp.seed is not None else int(torch.randint(0, 2**62, (1,))))
        self.rows: list[Row] = []
        self.kv: KVCache | None = None
        self.valid: Tensor | None = None  # [R_cap, S_cap] bool
        self.logits: Tensor | None = None  # [R, V] next-token logits of each row
        self.col = 0  # columns in use (the next decode writes this column)
        self.decoded = 0  # tokens sampled or forced (one decode forward each, bar the last of a row)
        self.prefilled = 0  # prompt + prefix tokens run through prefill by `add`
        self._scratch: dict = {}

    def __len__(self) -> int:
        return len(self.rows)

    # ------------------------------------------------------------------ cache management
    def _ensure(self, rows: int, cols: int, shift: int = 0) -> None:
        """Capacity for `rows` x `cols`; `shift` moves the used columns right (a longer row joins)."""
        have_r = 0 if self.kv is None else self.kv.batch
        have_c = 0 if self.kv is None else self.kv.k.shape[-1]
        if rows <= have_r and cols <= have_c and not shift:
            return
        r, c = max(rows, have_r, 1), max(cols, int(have_c * 1.5) if cols > have_c else have_c)
        kv = new_cache(self.w, r, c, self.dtype)
        kv = KVCache(kv.k.to(self.device), kv.v.to(self.device))
        valid = torch.ones(r, c, dtype=torch.bool, device=self.device)
        if self.kv is not None and self.rows:
            n, used = len(self.rows), self.col
            kv.k[:, :n, :, :, shift : shift + used] = self.kv.k[:, :n, :, :, :used]
            kv.v[:, :n, :, shift : shift + used] = self.kv.v[:, :n, :, :used]
            valid[:n, :shift] = False
            valid[:n, shift : shift + used] = self.valid[:n, :used]
        self.kv, self.valid = kv, valid
        self.col += shift

    # ------------------------------------------------------------------ rows in, rows out
    @torch.inference_mode()
    def add(self, rows: list[Row], chunk: int = 16) -> None:
        """Append rows that start from prompt + their `tokens` (prefilled, left-padded to the column)."""
        if not rows:
            return
        ctx = [r.prompt + r.tokens for r in rows]
        if any(not c for c in ctx):
            raise ValueError("TreeDecoder.add: a row has an empty prompt; every row needs at least one token")
        longest = max(len(c) for c in ctx)
        limit = self.engine.max_positions
        for r, c in zip(rows, ctx):
            if len(c) + self.sp.max_new_tokens - len(r.tokens) > limit:
                raise ValueError(f"TreeDecoder.add: a row of {len(c)} tokens with max_new_tokens={self.sp.max_new_tokens} "
                                 f"exceeds the engine's max_positions={limit}")  # fmt: skip
        shift = max(0, longest - self.col) if self.rows else 0
        if not self.rows:
            self.col = longest
        n0 = len(self.rows)
        self._ensure(n0 + len(rows), self.col + shift + 1, shift)
        width = self.col
        ids = torch.full((len(rows), width), self.engine.pad_token_id, dtype=torch.long, device=self.device)
        valid = torch.zeros(len(rows), width, dtype=torch.bool, device=self.device)
        for i, c in enumerate(ctx):
            ids[i, width - len(c) :] = torch.tensor(c, dtype=torch.long)
            valid[i, width - len(c) :] = True
        logits = torch.empty(len(rows), self.w.embed.shape[0], device=self.device)
        for a in range(0, len(rows), chunk):
            b = min(len(rows), a + chunk)
            logits[a:b] = prefill(self.w, ids[a:b], valid[a:b], self.kv.rows(n0 + a, n0 + b))
        self.valid[n0 : n0 + len(rows)] = True
        self.valid[n0 : n0 + len(rows), :width] = valid
        self.logits = logits if self.logits is None or not self.rows else torch.cat([self.logits, logits])
        self.rows.extend(rows)
        self.prefilled += sum(len(c) for c in ctx)

    @torch.inference_mode()
    def fork(self, index: list[int], payloads: list[Any] | None = None) -> None:
        """Keep rows `index` (any order, repeats = forks), copying their cache and logits."""
        if payloads is not None and len(payloads) != len(index):
            raise ValueError(f"fork: {len(index)} rows but {len(payloads)} payloads")
        if not index:
            self.rows, self.logits = [], None
            return
        idx = torch.tensor(index, dtype=torch.long, device=self.device)
        self._ensure(len(index), self.col + 1)
        self.kv.gather_rows(idx, self.col)
        self.valid[: len(index)] = self.valid[idx]
        self.logits = self.logits[idx]
        seen: set[int] = set()
        new = []
        for j, i in enumerate(index):
            p = None if payloads is None else payloads[j]
            new.append(self.rows[i].copy(p) if i in seen or p is not None else self.rows[i])
            seen.add(i)
        self.rows = new

    def take(self) -> list[Row]:
        """Remove and return every row (a strategy's abort: unfinished rows go to its buffer)."""
        rows, self.rows, self.logits = self.rows, [], None
        return rows

    # ------------------------------------------------------------------ decoding
    def decode(self, steps: int) -> list[Row]:
        """Up to `steps` sampled tokens per row; returns the rows that finished (removed)."""
        done: list[Row] = []
        for _ in range(steps):
            if not self.rows:
                break
            done.extend(self.step())
        return done

    @torch.inference_mode()
    def step(self, tokens: Tensor | None = None) -> list[Row]:
        """One token per row: sampled, or `tokens` [R] forced (their tempered log-probs recorded).
        Finished rows (stop token / stop string / max_new_tokens) are removed and returned."""
        sp, n = self.sp, len(self.rows)
        want_ent = sp.return_entropies
        if tokens is None:
            u = None if sp.greedy else torch.rand(n, generator=self.gen).to(self.device)
            tok, lp, ent = sample_tokens(self.logits, temperature=sp.temperature, greedy=sp.greedy, top_k=sp.top_k,
                                         top_p=sp.top_p, min_p=sp.min_p, uniforms=u, with_entropy=want_ent,
                                         scratch=self._scratch)  # fmt: skip
        else:
            tok = tokens.to(self.device, torch.long)
            z = self.logits.float() / sp.temperature
            lse = torch.logsumexp(z, -1)
            lp = z.gather(-1, tok[:, None]).squeeze(-1) - lse
            ent = (lse - (z.softmax(-1) * z).sum(-1)) if want_ent else None
        self.decoded += n
        finished = torch.isin(tok, self.stop_ids) if self.stop_ids.numel() else torch.zeros(n, dtype=torch.bool)
        tl, ll, el = tok.tolist(), lp.tolist(), ent.tolist() if ent is not None else None
        for i, r in enumerate(self.rows):
            r.tokens.append(tl[i])
            r.logprobs.append(ll[i])
            r.versions.append(self.version)
            if el is not None:
                r.entropies.append(el[i])
        if self.stops is not None:
            finished |= self._stop_strings(tok, finished)
        out: list[Row] = []
        keep = []
        for i, r in enumerate(self.rows):
            if bool(finished[i]) or len(r.tokens) >= sp.max_new_tokens:
                r.finish_reason = "stop" if bool(finished[i]) else "length"
                out.append(r)
            else:
                keep.append(i)
        if len(keep) < n:
            idx = torch.tensor(keep, dtype=torch.long, device=self.device)
            if keep:
                self.kv.gather_rows(idx, self.col)
                self.valid[: len(keep)] = self.valid[idx]
            self.rows, self.logits, tok = [self.rows[i] for i in keep], self.logits[idx], tok[idx]
        if self.rows:  # feed the new tokens: next-token logits for every row still running
            self._ensure(len(self.rows), self.col + 1)
            pos = torch.tensor([len(r.prompt) + len(r.tokens) - 1 for r in self.rows], device=self.device)
            live = self.kv.rows(0, len(self.rows))
            self.logits = decode_step(self.w, tok, pos, live, self.col, self.valid[: len(self.rows)]).float()
            self.col += 1
        return out

    def _stop_strings(self, tok: Tensor, finished: Tensor) -> Tensor:
        """Rows whose completion text now contains a stop string (rows grouped by length)."""
        out = torch.zeros_like(finished)
        by_len: dict[int, list[int]] = {}
        for i, r in enumerate(self.rows):
            by_len.setdefault(len(r.tokens), []).append(i)
        for length, idx in by_len.items():
            buf = torch.tensor([self.rows[i].tokens for i in idx], dtype=torch.long)
            rows = torch.arange(len(idx))
            alive = ~finished[idx]
            out[idx] = self.stops.check(buf, rows, tok[idx].cpu(), alive.cpu(), length - 1).to(out.device)
        return out
