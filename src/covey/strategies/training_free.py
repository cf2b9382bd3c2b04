"""`training_free_grpo`: Training-Free GRPO (arXiv 2510.08191), learning without a parameter update.

Checked against TencentCloudADP/youtu-agent bef6ba5 (`utu/practice/experience_updater.py`,
`training_free_grpo.py`, `utu/eval/processer/training_free_grpo_processor.py`,
`utu/config/practice_config.py`, `configs/practice/*.yaml`). The prompts are covey's own wording of the
same four stages (the released ones are not copied); the tags, the JSON operations, the group filter and
the way the plan is applied are the code's.

A group of G rollouts of one task is compared in natural language instead of by numbers, and what the
comparison teaches goes into an experience library E (id -> "Experience name: description.") that every
later prompt carries. No weight changes (``StrategyCaps(updates_policy=False)``: the learner trains
nothing, `covey.learner.objective.FrozenPolicy`); the library is this strategy's state, saved in every
checkpoint and restored by a resume. Per step:

    every item's prompt gets E (the problem, then the experiences as "[id]. text" lines, or "None")
    the inner strategy rolls out G per item (`group`, or `episodes` for agents), scored by the run's rewards
    groups whose mean reward is strictly between 0 and 1 are used (`given_ground_truth`; all groups otherwise)
    1. summary:        the model summarises each of their rollouts (the answer shown when given_ground_truth)
    2. group advantage: per group, it compares the summaries with their rewards and writes at most
                        `num_experiences` experiences inside <Experiences>...</Experiences>
    3. group update:   per group, it compares them with E and answers a JSON list of operations
                        {"operation": ADD|UPDATE|DELETE|NONE, "id": existing id or null, "content": ...}
    4. batch update:   it merges every group's operations into one JSON revision plan (3 tries to parse)
    5. apply:          ADD -> new id; UPDATE of an id in E -> replaced, of an unknown id -> added;
                       DELETE of an id in E -> removed; an entry without content is skipped (a DELETE too,
                       as the code does); then E is re-keyed G0, G1, ... in order

The model is a judge backend (`backend`, default the live policy through the trainer's engine; the
paper used one API model for both roles). Departures from the code, each to avoid a call that has
nothing to work on: a group whose <Experiences> block is missing or empty skips stage 3, and stage 4 is
skipped when no operation came back (the code calls the model then too). A reply that does not parse
drops its group (counted in `tfgrpo/failed_calls`), as the code's try/except does; nothing raises.
Defaults: the code's `PracticeArguments` (num_experiences 2, given_ground_truth true; its rollout
temperature 0.7 and group size 5 are run settings: `sampling.temperature`, `rollout.group_size`);
the updater decodes greedily (`temperature` 0; the code uses its model config's). The tiny random
models never write these tags or JSON, so their library stays empty: a plumbing check.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import re
from typing import Any

from covey.envs.llm import Asker, json_block
from covey.rollouts import Rollouts
from covey.strategies.base import STRATEGIES, RolloutContext, StrategyCaps, flag_of_inner, inner_with_env, register_strategy
from covey.strategies.group import completion_texts

__all__ = ["TrainingFreeGRPO", "apply_plan", "inject", "partial_groups"]

_EXPERIENCES = re.compile(r"<Experiences>\s*(.*?)\s*</Experiences>", re.DOTALL | re.IGNORECASE)
_OPERATIONS = ("ADD", "UPDATE", "DELETE", "NONE")

PROBLEM = ("Please solve the problem:\n{problem}\n\nBefore you start, read the experiences gathered from earlier attempts "
           "and follow the ones that apply:\n{experiences}")  # fmt: skip
ROLE = ("You help a working agent improve by learning from its past attempts. The agent's job:\n{agent}\n"
        "What it should learn:\n{learning}\n")  # fmt: skip
SUMMARY = (ROLE + "\nSummarise the attempt below step by step: what the agent did, which tools it called with which "
           "arguments and what came back, its reasoning, what it missed, and how it reached (or failed) the answer. "
           "Focus on what matters for what it should learn.\n\nTask:\n{question}\n\nReference answer:\n{answer}\n\n"
           "Attempt:\n{trajectory}")  # fmt: skip
GROUP_ADVANTAGE = (ROLE + "\nBelow are several attempts at one task, each with its reward (0 to 1, higher is better). "
                   "Compare the better attempts with the worse ones, find what made the difference, and write at most "
                   "{n} general experiences that would help on future tasks (phrase a conditional one as \"When ..., "
                   "...\"). Put them inside <Experiences>...</Experiences>, one numbered line each.\n\nTask:\n{question}"
                   "\n\nReference answer:\n{answer}\n\nAttempts:\n{attempts}")  # fmt: skip
GROUP_UPDATE = (ROLE + "\nHere is the current experience library and some new experiences. For each new experience "
                "decide one operation: ADD (new information), UPDATE (refines the existing experience with that id), "
                "DELETE (contradicts or obsoletes the existing experience with that id), NONE (already covered). "
                "Write each experience as \"Experience name: one sentence.\" Answer with a JSON list, one object per "
                "new experience: {{\"operation\": \"ADD|UPDATE|DELETE|NONE\", \"id\": \"existing id or null\", "
                "\"content\": \"...\"}}, inside ```json ... ```.\n\nCurrent library:\n{library}\n\nNew experiences:\n{new}")  # fmt: skip
BATCH_UPDATE = (ROLE + "\nBelow is the experience library, each entry with the operations proposed for it, and the "
                "proposed operations that name no entry. Merge them into one plan: several UPDATEs of one id become "
                "one UPDATE with their common insight, a DELETE of an id wins over its UPDATEs, similar ADDs become one "
                "ADD. Answer with a JSON list of {{\"operation\": \"ADD|UPDATE|DELETE|NONE\", \"id\": \"id or null\", "
                "\"content\": \"...\"}} inside ```json ... ```.\n\n{proposals}")  # fmt: skip


def inject(prompt: str | list[dict], library: dict[str, str]) -> str | list[dict]:
    """The prompt with the library: a text prompt is wrapped, a chat prompt's last user message is.

    >>> inject("2+2?", {"G0": "Check: re-add."})
    'Please solve the problem:\\n2+2?\\n\\nBefore you start, read the experiences gathered from earlier attempts and follow the ones that apply:\\n[G0]. Check: re-add.'
    """
    experiences = "\n".join(f"[{i}]. {e}" for i, e in library.items()) or "None"
    if isinstance(prompt, str):
        return PROBLEM.format(problem=prompt, experiences=experiences)
    out = copy.deepcopy(list(prompt))
    last = max((i for i, m in enumerate(out) if m.get("role") == "user"), default=None)
    if last is None:
        return [*out, {"role": "user", "content": PROBLEM.format(problem="", experiences=experiences)}]
    out[last] = {**out[last], "content": PROBLEM.format(problem=out[last]["content"], experiences=experiences)}
    return out


def partial_groups(rewards: list[float], groups: list[int], given_ground_truth: bool = True) -> list[int]:
    """The group ids the update learns from: mean reward strictly between 0 and 1 (the code's filter for
    partly right groups), or every group without ground truth.

    >>> partial_groups([1, 0, 1, 1, 0, 0], [0, 0, 1, 1, 2, 2])
    [0]
    """
    by: dict[int, list[float]] = {}
    for r, g in zip(rewards, groups):
        by.setdefault(g, []).append(float(r))
    return [g for g, rs in by.items() if not given_ground_truth or 0 < sum(rs) / len(rs) < 1]


def apply_plan(library: dict[str, str], plan: list) -> tuple[dict[str, str], dict[str, int]]:
    """The library after a revision plan (module docstring, stage 5), re-keyed G0..; and counts of what
    changed. Non-dict entries and unknown operations are skipped.

    >>> apply_plan({"G0": "a", "G1": "b"}, [{"operation": "UPDATE", "id": "G1", "content": "b2"},
    ...     {"operation": "ADD", "content": "c"}, {"operation": "DELETE", "id": "G0", "content": "x"}])[0]
    {'G0': 'b2', 'G1': 'c'}
    """
    new, next_id = dict(library), len(library)
    counts = {"added": 0, "updated": 0, "deleted": 0}
    for step in plan if isinstance(plan, list) else []:
        if not isinstance(step, dict):
            continue
        op, content, target = step.get("operation", "ADD"), step.get("content", ""), step.get("id")
        if not content or not isinstance(content, str):
            continue
        if op == "ADD" or (op == "UPDATE" and target not in new):
            new[str(next_id)], next_id = content, next_id + 1
            counts["added"] += 1
        elif op == "UPDATE":
            new[target] = content
            counts["updated"] += 1
        elif op == "DELETE" and target in new:
            del new[target]
            counts["deleted"] += 1
    return {f"G{i}": e for i, e in enumerate(new.values())}, counts


def _proposals(library: dict[str, str], operations: list[dict]) -> str:
    """Stage 4's input: each entry with the operations that name it, then those naming none."""
    parts = []
    for key, text in library.items():
        related = [json.dumps(op, ensure_ascii=False) for op in operations if op.get("id") == key]
        parts.append(f"Experience {key}:\nContent: {text}\n" + ("Proposed operations:\n" + "\n".join(related) if related
                                                                  else "No proposed operations."))  # fmt: skip
    loose = [json.dumps(op, ensure_ascii=False) for op in operations if not op.get("id")]
    if loose:
        parts.append("Operations that name no experience:\n" + "\n".join(loose))
    return "\n\n".join(parts)


_inner_of = inner_with_env("group")


@register_strategy("training_free_grpo")
class TrainingFreeGRPO:
    """Training-Free GRPO (module docstring): the inner strategy's rollouts, compared in words, update an
    experience library that every prompt carries; no weight changes.

    inner, inner_params: the strategy that rolls out (default `group`; `episodes` takes the run's env).
    backend:            the model that summarises and distils (judge backend; default the live policy).
    agent_objective, learning_objective: what the agent does and what it should learn (in every prompt).
    num_experiences:    at most this many experiences per group (stage 2).
    given_ground_truth: only partly right groups are used and the reference answer is shown (`answer_column`).
    max_new_tokens, temperature: the updater's decoding.
    """

    caps = StrategyCaps(inner=_inner_of, takes_env=flag_of_inner(_inner_of, "takes_env"),
                        env_reward=flag_of_inner(_inner_of, "env_reward"), updates_policy=False)  # fmt: skip

    def __init__(self, *, inner: str = "group", inner_params: dict[str, Any] | None = None, env: dict | None = None,
                 backend: Any = "policy", num_experiences: int = 2, given_ground_truth: bool = True,
                 agent_objective: str = "input: a question\noutput: step-by-step reasoning that leads to the final answer",
                 learning_objective: str = "Extract general, concise guidelines that help the agent answer such questions correctly.",
                 answer_column: str = "answer", max_new_tokens: int = 512, temperature: float = 0.0):  # fmt: skip
        if inner == "training_free_grpo":
            raise ValueError("training_free_grpo cannot wrap itself; give inner: group (or episodes)")
        if num_experiences < 1:
            raise ValueError(f"training_free_grpo: num_experiences must be >= 1, got {num_experiences}")
        name, params = _inner_of({"inner": inner, "inner_params": inner_params, **({"env": env} if env else {})})
        self.inner = STRATEGIES.build(name, params)
        self.llm = Asker(backend, max_new_tokens, temperature)
        self.num_experiences, self.given_ground_truth = int(num_experiences), bool(given_ground_truth)
        self.role = {"agent": agent_objective.strip(), "learning": learning_objective.strip()}
        self.answer_column = answer_column
        self.library: dict[str, str] = {}
        self.updates = 0  # steps whose plan changed the library

    # ------------------------------------------------------------------------------- one step
    def rollout(self, items: list[dict], ctx: RolloutContext) -> tuple[Rollouts, dict[str, float]]:
        shown = [{**it, "prompt": inject(it["prompt"], self.library), "original_prompt": it["prompt"]} for it in items]
        ctx = dataclasses.replace(ctx, draws=[dataclasses.replace(d, item=shown[i]) for i, d in enumerate(ctx.draws)])
        batch, metrics = self.inner.rollout(shown, ctx)
        metrics = dict(metrics)
        if len(batch) and batch.rewards is None:
            metrics.update(ctx.score(batch))
        if len(batch):
            self.llm.bind(ctx)
            metrics.update(self._learn(batch, ctx))
        metrics["tfgrpo/library_size"] = float(len(self.library))
        return batch, metrics

    def _learn(self, batch: Rollouts, ctx: RolloutContext) -> dict[str, float]:
        """Stages 1-5 on the step's scored batch; returns the step's metrics."""
        rollouts = _rollouts(batch, ctx.tokenizer)  # (group, item, reward, trajectory text), one per rollout
        keep = set(partial_groups([r[2] for r in rollouts], [r[0] for r in rollouts], self.given_ground_truth))
        used = [r for r in rollouts if r[0] in keep]
        out = {"tfgrpo/groups_used": float(len(keep)), "tfgrpo/failed_calls": 0.0, "tfgrpo/experiences": 0.0,
               "tfgrpo/operations": 0.0, "tfgrpo/added": 0.0, "tfgrpo/updated": 0.0, "tfgrpo/deleted": 0.0}  # fmt: skip
        if not used:
            return out
        seed = ctx.sampling(0).seed or 0
        answer = (lambda it: str(it.get(self.answer_column, ""))) if self.given_ground_truth else (lambda it: "[REDACTED]")
        summaries = self.llm.ask([self._chat(SUMMARY.format(question=_question(it), answer=answer(it), trajectory=traj, **self.role))
                                  for _, it, _, traj in used], seed)  # fmt: skip
        by_group: dict[int, list[tuple[dict, float, str]]] = {}
        for (g, it, reward, _), summary in zip(used, summaries):
            if summary is None:
                out["tfgrpo/failed_calls"] += 1
                continue
            by_group.setdefault(g, []).append((it, reward, summary))
        groups = list(by_group.values())
        advice = self.llm.ask([self._chat(GROUP_ADVANTAGE.format(
            n=self.num_experiences, question=_question(rows[0][0]), answer=answer(rows[0][0]),
            attempts="\n\n".join(f"Attempt {i + 1} (reward {r if self.given_ground_truth else '[REDACTED]'}):\n{s}"
                                 for i, (_, r, s) in enumerate(rows)), **self.role)) for rows in groups], seed + 10_000)  # fmt: skip
        new = []
        for reply in advice:
            found = _EXPERIENCES.search(reply or "")
            if reply is None:
                out["tfgrpo/failed_calls"] += 1
            elif found and found.group(1).strip():
                new.append(found.group(1).strip())
        out["tfgrpo/experiences"] = float(len(new))
        library = "\n".join(f"[{i}]. {e}" for i, e in self.library.items()) or "None"
        replies = self.llm.ask([self._chat(GROUP_UPDATE.format(library=library, new=x, **self.role)) for x in new], seed + 20_000)
        operations = []
        for reply in replies:
            ops = json_block(reply)
            if not isinstance(ops, list):
                out["tfgrpo/failed_calls"] += 1
                continue
            operations += [op for op in ops if isinstance(op, dict) and op.get("operation") in _OPERATIONS]
        out["tfgrpo/operations"] = float(len(operations))
        if not operations:
            return out
        plan = None
        for attempt in range(3):  # the code's max_retries
            (reply,) = self.llm.ask([self._chat(BATCH_UPDATE.format(proposals=_proposals(self.library, operations), **self.role))],
                                    seed + 30_000 + attempt)  # fmt: skip
            plan = json_block(reply)
            if isinstance(plan, list):
                break
            out["tfgrpo/failed_calls"] += 1
        if isinstance(plan, list):
            self.library, counts = apply_plan(self.library, plan)
            self.updates += any(counts.values())
            out.update({f"tfgrpo/{k}": float(v) for k, v in counts.items()})
        return out

    @staticmethod
    def _chat(text: str) -> list[dict]:
        return [{"role": "user", "content": text}]

    # ------------------------------------------------------------------------------- checkpoint
    def state_dict(self) -> dict[str, Any]:
        return {"library": dict(self.library), "updates": self.updates, "inner": self.inner.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.library = {str(k): str(v) for k, v in (state.get("library") or {}).items()}
        self.updates = int(state.get("updates", 0))
        self.inner.load_state_dict(state.get("inner", {}))


def _question(item: dict) -> str:
    """The task as the updater sees it: the item's original prompt (before the library was injected)."""
    prompt = item.get("original_prompt", item["prompt"])
    if isinstance(prompt, str):
        return prompt
    return "\n".join(f"{m.get('role')}: {m.get('content')}" for m in prompt)


def _rollouts(batch: Rollouts, tok) -> list[tuple[int, dict, float, str]]:
    """One (group, item, reward, trajectory) per rollout: a row, or an episode (its transcript, once)."""
    rewards = batch.scalar_rewards().tolist()
    texts = completion_texts(tok, batch)
    seen, out = set(), []
    for i, (g, item) in enumerate(zip(batch.group.tolist(), batch.items)):
        key = int(batch.episode[i]) if batch.episode is not None else i
        if key in seen:
            continue
        seen.add(key)
        transcript = item.get("transcript")
        traj = json.dumps(transcript, ensure_ascii=False) if transcript is not None else texts[i]
        out.append((g, item, float(rewards[i]), traj))
    return out

