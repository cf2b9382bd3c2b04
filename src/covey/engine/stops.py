"""Stop strings: end a row when its completion text contains one of the given strings.

Checked every decode step on text, not tokens, since a string can be split over tokens in many
ways. To keep the per-step cost near zero, only rows whose newest token could end a match are
decoded: a token is a candidate when its own text contains the last character of a stop string,
or is an incomplete UTF-8 piece (decodes to U+FFFD). A candidate row's last `window` completion
tokens are decoded (prompt text never matches) and searched. The row ends at the token that
completed the match; that token is kept (and masked 1), even if its text runs past the match.

Devices: the candidate table is kept on each device it is asked about (one copy per device); the
tensors passed in may live on any one device, the result is on `alive`'s device. On CUDA a check
costs one host synchronisation (the list of candidate rows); the text search is host work.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["StopStrings"]


class StopStrings:
    """Stop-string matcher for one tokenizer and one tuple of strings (vocab size V)."""

    def __init__(self, tokenizer, strings: tuple[str, ...], vocab_size: int):
        bad = [s for s in strings if not isinstance(s, str) or not s]
        if bad:
            raise ValueError(f"stop_strings must be non-empty strings, got {bad!r}")
        self.tokenizer = tokenizer
        self.strings = strings
        # Each character is at most 4 UTF-8 bytes, so at most 4 byte-level tokens, plus a partial one.
        self.window = 4 * max(len(s) for s in strings) + 2
        ends = {s[-1] for s in strings}
        n_tok = min(len(tokenizer), vocab_size)
        texts = tokenizer.batch_decode([[i] for i in range(n_tok)], skip_special_tokens=False)
        cand = torch.ones(vocab_size, dtype=torch.bool, device="cpu")  # ids the tokenizer does not know: always check
        cand[:n_tok] = torch.tensor([("\ufffd" in t) or any(c in t for c in ends) for t in texts], device="cpu")
        self.candidate = cand
        self._tables: dict[torch.device, Tensor] = {cand.device: cand}

    def _table(self, device: torch.device) -> Tensor:
        if device not in self._tables:
            self._tables[device] = self.candidate.to(device)
        return self._tables[device]

    def check(self, out_tok: Tensor, rows: Tensor, tok: Tensor, alive: Tensor, step: int) -> Tensor:
        """[B] bool: which active rows end at this step. out_tok [N, T] holds tokens up to `step`."""
        done = torch.zeros(alive.shape, dtype=torch.bool, device="cpu")
        check = (self._table(tok.device)[tok] & alive).nonzero().squeeze(1).tolist()
        if not check:
            return done.to(alive.device)
        lo = max(0, step + 1 - self.window)
        tails = out_tok[rows[check], lo : step + 1].tolist()
        texts = self.tokenizer.batch_decode(tails, skip_special_tokens=False)
        for i, text in zip(check, texts):
            if any(s in text for s in self.strings):
                done[i] = True
        return done.to(alive.device)
