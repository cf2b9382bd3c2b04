r"""`step_correction`: SCOPE's step-wise correction of failed rollouts (arXiv 2602.24110, "Recycling
Failures"). Status RECONSTRUCTED: the abstract confirms a process reward model that finds the first
erroneous step of a failed rollout, the correct prefix kept on-policy and the rest rectified
off-policy; the corrector, the loss on its tokens and all constants are covey's design. No code of
the authors was found (searched 2026-11-24).

    sample the group (`sample_groups`), score it (`ctx.score`)
    for each failed row (success 0: the `accuracy` column, else the scalar reward; feedback.row_success):
        steps = the completion split at blank lines ("\n\n")
        k = judge(prompt, answer, completion)      FAPO's `step_error_index` template, `boxed_int`
                                                   parser: the 0-based index of the first wrong step
        k = -1 (no error found), k = 0 (first step wrong), k >= #steps or unreadable: left as it is
        k >= 1: keep the tokens whose text lies inside steps[:k] and their blank-line separator
                (the longest token prefix whose decoded text is a prefix of that text; on-policy,
                behaviour log-probs kept), then ask the corrector to continue the solution from there
                o' = kept tokens + the corrector's tokens (+ EOS), cut at `sampling.max_new_tokens`
    the corrected rows are scored (on their own: a group-wise reward sees them as a set of their own, so
    this strategy is meant for per-row verifiers) and join their group (unequal groups), each with its
    true reward;
    `offpolicy_mask` [N, T] is 1 on the corrector's tokens (behaviour log-probs 0 there)

The learner reads `offpolicy_mask` (`covey.algos.surrogates.offpolicy_shaped_loss`): on those tokens
the surrogate's loss is replaced by LUFFY's shaped, unclipped policy-gradient term
-A · f(pi_theta), f(x) = x / (x + 0.1), since the corrector's own token probabilities are not
available (an HTTP judge returns none, and the hinted policy's probabilities are conditioned on a
prompt the trained policy never sees), so no importance ratio to a behaviour policy can be formed.

Corrector (`corrector:` a judge backend spec, default ``{kind: policy}``): the live policy, prompted
with the problem, the kept steps and, by default, the item's reference answer as a hint
(`hint_column: answer`; null for no hint), greedy. ``{kind: local, model: ...}`` uses a stronger
local model, ``{kind: openai, ...}`` an endpoint.
"""

from __future__ import annotations

import re
from typing import Any

import torch

from covey.rewards.judge.backends import JudgeRequest, build_backend
from covey.rewards.judge.core import Judge
from covey.rewards.judge.reward import prompt_text
from covey.rollouts import Rollouts
from covey.samplers.feedback import row_success
from covey.strategies.base import RolloutContext, register_strategy
from covey.strategies.group import completion_texts, sample_groups

__all__ = ["CORRECTOR_TEMPLATE", "StepCorrection", "kept_tokens", "prefix_chars", "split_steps"]

CORRECTOR_TEMPLATE = (  # covey's own wording (the paper's corrector prompt is not published)
    "The following is a problem and the beginning of a solution whose steps are correct so far.\n\n"
    "[Problem]\n\n{prompt}\n\n{hint}[Partial Solution]\n\n{prefix}\n\n"
    "Continue the solution from where it stops. Write only the remaining steps, separated by blank lines, "
    "and put the final answer in \\boxed{{}}."
)
_BLANK = re.compile(r"\n\s*\n")


def _step_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of each step: the non-blank chunks between blank lines ("\n", optional spaces, "\n")."""
    seps = [(m.start(), m.end()) for m in _BLANK.finditer(text)]
    starts, ends = [0] + [e for _, e in seps], [s for s, _ in seps] + [len(text)]
    return [(a, b) for a, b in zip(starts, ends) if text[a:b].strip()]


def split_steps(text: str) -> list[str]:
    """The steps of a completion.

    >>> split_steps("a\\n\\nb\\n \\n\\nc\\n"), split_steps("")
    (['a', 'b', 'c\\n'], [])
    """
    return [text[a:b] for a, b in _step_spans(text)]


def prefix_chars(text: str, k: int) -> int:
    """Characters of `text` before step k begins (steps[:k] and the blank line after them);
    `len(text)` when there are k steps or fewer."""
    spans = _step_spans(text)
    return spans[k][0] if k < len(spans) else len(text)


def kept_tokens(decode, ids: list[int], cut_text: str) -> int:
    """The largest m with decode(ids[:m]) a prefix of `cut_text` (binary search; 0 if none)."""
    lo, hi = 0, len(ids)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if cut_text.startswith(decode(ids[:mid])):
            lo = mid
        else:
            hi = mid - 1
    return lo


@register_strategy("step_correction")
class StepCorrection:
    """Salvage failed rollouts: keep the prefix before the judged first error, let a corrector finish.

    judge:          the first-error judge's backend ({kind: local | openai | policy, ...}).
    judge_template, judge_parser, judge_max_new_tokens, judge_temperature: as for `fapo`
                    (step_error_index, boxed_int).
    corrector:      the backend that writes the rest (default {kind: policy}: the live policy).
    corrector_max_new_tokens: its reply budget (the row is still cut at sampling.max_new_tokens).
    hint_column:    item column shown to the corrector as the reference answer (null: none).
    answer_column:  item column the judge's template reads as the ground truth.
    """

    def __init__(self, *, judge: Any, judge_template: str = "step_error_index", judge_parser: Any = "boxed_int",
                 judge_max_new_tokens: int = 512, judge_temperature: float = 0.0, corrector: Any = "policy",
                 corrector_max_new_tokens: int = 256, hint_column: str | None = "answer", answer_column: str = "answer"):  # fmt: skip
        self.judge = Judge(judge, judge_template, judge_parser, max_new_tokens=judge_max_new_tokens,
                           temperature=judge_temperature, parse_retries=0)  # fmt: skip
        if self.judge.parser_name != "boxed_int":
            raise ValueError("step_correction: judge_parser must be boxed_int (the first wrong step's index)")
        self.corrector = build_backend(corrector)
        if corrector_max_new_tokens < 1:
            raise ValueError(f"step_correction: corrector_max_new_tokens must be >= 1, got {corrector_max_new_tokens}")
        self.corrector_max_new_tokens = int(corrector_max_new_tokens)
        self.hint_column, self.answer_column = hint_column, answer_column

    def _set_context(self, ctx: RolloutContext) -> None:
        for backend in (self.judge.backend, self.corrector):
            if getattr(backend, "kind", None) == "policy":
                backend.set_context(engine=ctx.engine, tokenizer=ctx.tokenizer, policy_version=ctx.policy_version)

    def rollout(self, items: list[dict], ctx: RolloutContext) -> tuple[Rollouts, dict[str, float]]:
        sampling = ctx.sampling(0)
        batch = sample_groups(ctx.engine, ctx.tokenizer, ctx.draws, sampling)
        metrics = dict(ctx.score(batch))
        batch.offpolicy_mask = torch.zeros_like(batch.completion_mask)
        success = row_success(batch)
        failed = [i for i, s in enumerate(success.tolist()) if s <= 0]
        out = {"step_correction/failed_frac": len(failed) / len(batch), "step_correction/corrected_frac": 0.0,
               "step_correction/sampled_success": float(success.mean())}  # fmt: skip
        if not failed:
            return batch, {**metrics, **out}
        self._set_context(ctx)
        texts = completion_texts(ctx.tokenizer, batch)
        fields = [{"prompt": prompt_text(batch.items[i]["prompt"]), "completion": texts[i],
                   "answer": str(batch.items[i].get(self.answer_column, ""))} for i in failed]  # fmt: skip
        values, why, stats = self.judge.ask(fields)
        plans = []  # (row, kept tokens, kept text)
        ks = []
        for i, v in zip(failed, values):
            steps = split_steps(texts[i])
            k = None if v is None else int(v)
            if k is None or not 1 <= k < len(steps):
                if k is not None and k >= -1:
                    ks.append(k)
                continue
            ks.append(k)
            ids = batch.completion_ids[i, : int(batch.lengths[i])].tolist()
            decode = lambda t: ctx.tokenizer.decode(t, skip_special_tokens=True)  # noqa: E731
            m = kept_tokens(decode, ids, texts[i][: prefix_chars(texts[i], k)])
            if m > 0:
                plans.append((i, m, decode(ids[:m])))
        out.update({
            "step_correction/judge_unreadable_frac": sum(w is not None for w in why) / len(failed),
            "step_correction/judge_requests": stats["requests"],
        })  # fmt: skip
        if ks:  # no readable index: no mean_k this round
            out["step_correction/mean_k"] = sum(ks) / len(ks)
        if not plans:
            return batch, {**metrics, **out}
        corrected = self._corrected_rows(batch, plans, ctx, sampling.max_new_tokens)
        out["step_correction/corrector_failures"] = float(len(plans) - (0 if corrected is None else len(corrected)))
        if corrected is None:
            return batch, {**metrics, **out}
        ctx.score(corrected)  # the corrected rows alone: the sampled rows keep their scores (and are counted once)
        success = row_success(corrected)
        joined = Rollouts.concat([batch, corrected])
        out["step_correction/corrected_frac"] = len(corrected) / len(failed)
        out["step_correction/corrected_success_rate"] = float(success.mean())
        joined = joined.select(torch.argsort(joined.group, stable=True))  # corrected rows next to their group
        return joined, {**metrics, **out}

    def _corrected_rows(self, batch: Rollouts, plans, ctx: RolloutContext, max_new: int) -> Rollouts | None:
        """The corrected rows (None when the corrector failed on every request)."""
        tok = ctx.tokenizer
        reqs = []
        for i, _, kept in plans:
            item = batch.items[i]
            hint = "" if self.hint_column is None else f"[Reference Answer]\n\n{item.get(self.hint_column, '')}\n\n"
            text = CORRECTOR_TEMPLATE.format(prompt=prompt_text(item["prompt"]), hint=hint, prefix=kept)
            reqs.append(JudgeRequest(messages=(("user", text),), max_new_tokens=self.corrector_max_new_tokens))
        replies = self.corrector.complete(reqs)
        eos = list(getattr(ctx.engine, "eos_ids", None) or ([tok.eos_token_id] if tok.eos_token_id is not None else []))
        rows, finish = [], []
        for (i, m, _), reply in zip(plans, replies):
            if reply.error or reply.text is None:  # the corrector failed (HTTP error, prompt too long): no row
                continue
            suffix = tok.encode(reply.text or "", add_special_tokens=False) + eos[:1]
            ids = batch.completion_ids[i, :m].tolist() + suffix
            finish.append("stop" if len(ids) <= max_new else "length")
            rows.append((i, m, ids[:max_new]))
        if not rows:
            return None
        t = max(len(ids) for _, _, ids in rows)
        n, idx = len(rows), [i for i, _, _ in rows]
        comp = torch.full((n, t), tok.pad_token_id if tok.pad_token_id is not None else 0, dtype=torch.long)
        mask, lp, off = torch.zeros(n, t), torch.zeros(n, t), torch.zeros(n, t)
        src = batch.select(idx)
        pv = None if src.policy_version is None else torch.full((n, t), ctx.policy_version, dtype=torch.long)
        ent = None if src.entropies is None else torch.zeros(n, t)
        for r, (i, m, ids) in enumerate(rows):
            comp[r, : len(ids)] = torch.tensor(ids, dtype=torch.long)
            mask[r, : len(ids)] = 1.0
            off[r, m : len(ids)] = 1.0
            lp[r, :m] = batch.behaviour_logprobs[i, :m]  # the kept prefix: on-policy, its own log-probs
            if pv is not None:
                pv[r, :m] = batch.policy_version[i, :m]
            if ent is not None:
                ent[r, :m] = batch.entropies[i, :m]
        return Rollouts(
            prompt_ids=list(src.prompt_ids), completion_ids=comp, completion_mask=mask, behaviour_logprobs=lp,
            group=src.group.clone(), prompt_id=src.prompt_id.clone(), finish_reason=finish, entropies=ent,
            policy_version=pv, items=list(src.items), offpolicy_mask=off,
        ).validate()  # fmt: skip

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass
