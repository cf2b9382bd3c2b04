r"""`masa_meta`: MASA's meta-awareness rollouts and their reward, next to the ordinary solution rollouts.

Paper: "Meta-Awareness Enhances Reasoning Models: Self-Alignment Reinforcement Learning" (arXiv 2510.03259).
Checked against the released code: akatigre/MASA-RL @ fad5726e5570e6eefdecc35dc7be5db42c909e93
(`masa_train/masa_rl_dataset.py` (the meta prompt), `masa_train/masa_ray_trainer.py` (solution and meta
batches generated together), `verl/workers/reward_manager/masa_naive.py` (the per-prompt statistics),
`verl/utils/reward_score/meta_cog.py::compute_score`, `verl/utils/reward_score/utils.py::
extract_last_json_object`, `train_masagrpo.sh`: n = meta_cog_n = 16).

Per prompt q, in one step:

    G solution rollouts o_1..o_G of q, scored by the run's rewards: correct c_j (scalar reward > 0.5) and
        length l_j (completion tokens)
    M meta rollouts of the meta prompt (the problem inside the released instruction: reason in
        <meta>...</meta>, then a JSON object {"math_notion": [...], "pass_rate": 0..8,
        "solution_length": int})
    each meta rollout's JSON J (the last {"math_notion": ...} object; else the released fallback
        regexes) gets the meta reward, the mean of three parts (a part whose key is missing, or not
        an int for pass_rate / solution_length, is 0):
        r_acc    = 0.01 ** |mean(c) - J.pass_rate / 8|
        r_len    = 1 if min(l_j : c_j) < J.solution_length < max(l_j : c_j) else 0   (0 if none correct)
        r_notion = over the predicted notions (singularised; those found in the meta prompt's text
                   dropped): the fraction whose count (#correct o_j containing it - #incorrect ones) is > 0
    both kinds train with the run's estimator in their own groups: the solution rows with the run's
    rewards, the meta rows with the meta reward (reward column `meta`, the other columns zero on them).

The divisor 8 is the code's constant (`pass_rate_scale`), whatever G is (the scripts use G = 16 with a
prompt asking for 0..8). Not built: the trainer's optional feed-in of a meta prediction into the
solution prompt (`meta_feedin`, off in the released config), and the meta-SFT on the best meta
responses (`meta_sft`, off there too). MASA-efficient's gating and cut-off are the `masa` sampler
(reconstructed, history-based). Metrics: masa/meta_reward, masa/acc_score, masa/length_score,
masa/notion_score, masa/json_ok.
"""

from __future__ import annotations

import json
import re
from typing import Any

import torch

from covey.rollouts import Rollouts
from covey.samplers import Draw
from covey.samplers.groups import completion_texts, sample_groups
from covey.strategies._hints import add_column, prompt_text
from covey.strategies.base import RolloutContext, StrategyCaps, register_strategy

__all__ = ["META_PROMPT", "MasaMeta", "meta_json", "meta_score", "singularize"]

CORRECT = 0.5
# masa_train/masa_rl_dataset.py (its leading indentation is part of the released f-string; {max_length} is the
# dataset's max_prompt_length there, here the meta rollouts' max_new_tokens by default)
META_PROMPT = """
                Think step-by-step between <meta> and </meta>, ensuring comprehensive and detailed reasoning especially for determining the pass_rate and solution_length values. For each component (math_notion, pass_rate, solution_length), provide a comprehensive illustration or example during your reasoning in the <meta> section to clarify how each value is decided. When determining math_notion, ensure that the notions listed do not directly include the notions already written in the problem statement. After </meta>, return a JSON object with three keys:
- math_notion (list[str])
- pass_rate (integer from 0 to 8)
- solution_length (integer from 128 to {max_length})

Problem: {problem}
                """


def singularize(word: str) -> str:
    """The released rule for regular English plurals (identities -> identity, cosines -> cosine)."""
    w = word.lower()
    if w.endswith("ies") and w != "series":
        return word[:-3] + "y"
    if w.endswith(("ches", "shes", "xes", "zes", "oes")):
        return word[:-2]
    if w.endswith("s") and not w.endswith("ss") and w != "series":
        return word[:-1]
    return word


def meta_json(text: str) -> dict:
    """`extract_last_json_object`: the last ``{"math_notion": ...}`` object (no nested braces), else the
    fallback regexes over unquoted ``key: value`` text (its solution_length pattern takes 1-2 digits and
    then requires 1024..16384, so the fallback never yields a length: kept as released)."""
    try:
        found = re.findall(r'(\{["\']math_notion["\']:[^\}]*\})', text, re.DOTALL)
        return json.loads(found[-1])
    except (IndexError, ValueError):
        out: dict[str, Any] = {}
    notion = re.search(r"math_notion\s*:\s*(\[[^\]]*\])", text)
    if notion:
        try:
            notions = json.loads(notion.group(1))
        except ValueError:
            notions = [s.strip().strip('"').strip("'") for s in notion.group(1).strip("[]").split(",") if s.strip()]
        out["math_notion"] = notions or None
    length = re.search(r"solution_length\s*:\s*(\d{1,2})", text)
    if length:
        n = int(length.group(1))
        out["solution_length"] = n if 1024 <= n <= 16384 else None
    return out


def meta_score(pred: dict, problem: str, responses: list[str], correct: list[bool], lengths: list[int],
               pass_rate_scale: float = 8.0) -> dict[str, float]:  # fmt: skip
    """`meta_cog.compute_score`: {score, notion_score, pred_acc_score, length_score} of one meta prediction."""
    notion_score = acc_score = length_score = 0.0
    if "math_notion" in pred:
        notions = pred.get("math_notion", "")
        try:
            if "," in notions:
                notions = [n.strip().strip("[").strip("]") for n in notions.split(",")]
            elif not isinstance(notions, list):
                notions = [notions]
            notions = [n for n in map(singularize, notions) if n not in problem]
            counts = {n: 0 for n in notions}
            for resp, ok in zip(responses, correct):
                for n in notions:
                    if n in resp:
                        counts[n] += 1 if ok else -1
            if counts:
                notion_score = sum(1 for c in counts.values() if c > 0) / len(counts)
        except (TypeError, AttributeError):  # the code catches any error: the part scores 0
            notion_score = 0.0
    if isinstance(pred.get("solution_length"), int) and not isinstance(pred.get("solution_length"), bool):
        good = [n for n, ok in zip(lengths, correct) if ok]
        length_score = float(bool(good) and max(good) > pred["solution_length"] > min(good))
    if isinstance(pred.get("pass_rate"), int) and not isinstance(pred.get("pass_rate"), bool):
        acc_score = 0.01 ** abs(sum(correct) / len(correct) - pred["pass_rate"] / pass_rate_scale)
    return {"score": (notion_score + acc_score + length_score) / 3, "notion_score": notion_score,
            "pred_acc_score": acc_score, "length_score": length_score}  # fmt: skip


@register_strategy("masa_meta")
class MasaMeta:
    """MASA's meta rollouts (see the module docstring).

    meta_n: meta rollouts per prompt (None: the prompt's group size, as the scripts' meta_cog_n = n).
    pass_rate_scale: the divisor of the predicted pass rate (the code's 8).
    max_length: the upper end of solution_length named in the meta prompt (None: max_new_tokens).
    meta_max_new_tokens: the meta rollouts' token budget (0: the run's max_new_tokens).
    """

    caps = StrategyCaps()

    def __init__(self, *, meta_n: int | None = None, pass_rate_scale: float = 8.0, max_length: int | None = None,
                 meta_max_new_tokens: int = 0, template: str = META_PROMPT):  # fmt: skip
        if meta_n is not None and meta_n < 1:
            raise ValueError(f"masa_meta: meta_n must be >= 1, got {meta_n}")
        if pass_rate_scale <= 0:
            raise ValueError(f"masa_meta: pass_rate_scale must be > 0, got {pass_rate_scale}")
        if "{problem}" not in template:
            raise ValueError("masa_meta: the template must contain {problem}")
        if meta_max_new_tokens < 0:
            raise ValueError(f"masa_meta: meta_max_new_tokens must be >= 0, got {meta_max_new_tokens}")
        self.meta_n, self.scale, self.max_length = meta_n, pass_rate_scale, max_length
        self.meta_tokens, self.template = meta_max_new_tokens, template

    def meta_prompt(self, item: dict, max_length: int):
        """The meta prompt: a system + user chat as released for a chat task, the text alone for a plain one."""
        text = self.template.replace("{max_length}", str(max_length)).replace("{problem}", prompt_text(item["prompt"]))
        if isinstance(item["prompt"], str):
            return text
        return [{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": text}]

    def rollout(self, items: list[dict], ctx: RolloutContext) -> tuple[Rollouts, dict[str, float]]:
        tok, draws = ctx.tokenizer, ctx.draws
        sp = ctx.sampling(0)
        batch = sample_groups(ctx.engine, tok, draws, sp)
        batch.items = [draws[int(g)].item for g in batch.group.tolist()]
        metrics = {f"solution/{k}": v for k, v in ctx.score(batch).items()}
        correct = (batch.scalar_rewards() > CORRECT).tolist()
        lengths = batch.completion_mask.sum(1).tolist()
        texts = completion_texts(tok, batch)
        max_len = self.max_length or sp.max_new_tokens
        meta_prompts = [self.meta_prompt(d.item, max_len) for d in draws]
        meta_draws = [Draw(item={**d.item, "prompt": p}, n=self.meta_n or d.n) for d, p in zip(draws, meta_prompts)]
        msp = ctx.sampling(1)
        if self.meta_tokens:
            import dataclasses

            msp = dataclasses.replace(msp, max_new_tokens=self.meta_tokens)
        meta = sample_groups(ctx.engine, tok, meta_draws, msp)
        meta.items = [meta_draws[int(g)].item for g in meta.group.tolist()]
        rewards, parts, ok_json = [], {"pred_acc_score": [], "length_score": [], "notion_score": []}, []
        for g, text in zip(meta.group.tolist(), completion_texts(tok, meta)):
            rows = [j for j, h in enumerate(batch.group.tolist()) if h == g]
            pred = meta_json(text)
            ok_json.append(float(bool(pred)))
            problem = prompt_text(meta_prompts[g])
            s = meta_score(pred, problem, [texts[j] for j in rows], [correct[j] for j in rows], [lengths[j] for j in rows], self.scale)
            rewards.append(s["score"])
            for k in parts:
                parts[k].append(s[k])
        batch = add_column(batch, "meta")
        meta.rewards, meta.reward_names, meta.reward_weights = (torch.zeros(len(meta), len(batch.reward_names) - 1),
                                                                batch.reward_names[:-1], batch.reward_weights[:-1])  # fmt: skip
        meta = add_column(meta, "meta", torch.tensor(rewards), only=True)
        meta.group = meta.group + len(draws)
        mean = lambda xs: sum(xs) / len(xs) if xs else 0.0  # noqa: E731
        metrics.update({"masa/meta_reward": mean(rewards), "masa/acc_score": mean(parts["pred_acc_score"]),
                        "masa/length_score": mean(parts["length_score"]), "masa/notion_score": mean(parts["notion_score"]),
                        "masa/json_ok": mean(ok_json)})  # fmt: skip
        return Rollouts.concat([batch, meta]), metrics

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass
