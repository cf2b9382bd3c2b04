"""`mpo`: MPO's rubric judge whose rubric a meta-judge refines during training (arXiv 2504.20157).

Rules after the authors' code as the spec read it (the MPO repository's
``trl/trainer/mpo_trainer.py``, ``trl/extras/mpo/__init__.py``, ``rm_essay_writing.py``); the prompts are
covey's wording (the reference's are task-specific essay / summary prompts):

    score(c)  = sum over rubric items k of s_k; s_k = the judge's score of c on item k alone
                (an unreadable item scores 0, as in the reference)
    every `interval` calls (not the first): the meta-judge reads up to `samples` rows of the previous call
                (prompt, response, score, the current rubric) and proposes refined criteria as <item>..</item>;
                a merge request turns all proposals into one non-overlapping list; the unique <item> texts
                become rubric iteration k + 1 (an empty merge keeps the rubric: the reference would write
                an empty one)

Departures: one judge turn per item ("a short rationale, then 'Score: N'", read by `labeled_number`)
where the reference asks the rationale (temperature 0.02, 300 tokens, stop <EOE>) and then the integer in
a second turn; the meta-judge's analyse / count / criterion-by-criterion turns are one request per row
and one merge request; no prescreen (the reference's optional good / ok / bad pass); rows are the
first `samples` of the previous call, in order (the reference draws them at random). covey trains with
GRPO-family losses: a covey run is "MPO's evolving rubric under GRPO" (the paper's numbers are PPO).

State: the rubric lives in the reward, so it runs in the trainer's process (``in_process``). With
`rubric_dir` each iteration is written to ``rubric_dir/iter_<k>.txt`` (atomically), and a new reward
starts from the newest file there: a resumed run continues from its last rubric. The rubric text is in
every judge prompt, so cached replies never cross rubric versions. Metrics: ``rubric_iter``,
``rubric_items``, ``item_fail_frac`` and the judge metrics.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from typing import Any

from covey.rewards._scoring import RewardOutput
from covey.rewards.judge.backends import JudgeRequest, build_backend
from covey.rewards.judge.core import Judge, JudgeHolder
from covey.rewards.judge.reward import judge_metrics, prompt_text
from covey.rewards.math import completion_text
from covey.rewards.registry import register_reward

__all__ = ["MpoReward", "parse_items"]

ITEM_TEMPLATE = (
    "Evaluate the response to the task below on ONE criterion only.\n\n[Task]\n{prompt}\n\n[Response]\n{completion}\n\n"
    "[Criterion]\n{answer}\n\nWrite a short rationale (at most three sentences), then end with a line 'Score: N' where N "
    "is an integer from 0 (fails the criterion) to 10 (fully meets it)."
)
META_PROMPT = (
    "You maintain the grading rubric of a reward model. Current rubric:\n{rubric}\n\nA response it graded:\n[Task]\n"
    "{prompt}\n\n[Response]\n{completion}\n\n[Score given]\n{score}\n\nIf the rubric let a poor response score well or a good "
    "one score badly, write improved criteria that would grade it correctly. Reply with the complete refined rubric, one "
    "criterion per <item>...</item>."
)
MERGE_PROMPT = (
    "Merge these proposed grading criteria into one rubric of non-overlapping criteria (at most {max_items}); keep each "
    "criterion concrete and checkable. Reply with one criterion per <item>...</item> and nothing else.\n\n{proposals}"
)
_ITEM = re.compile(r"<item>(.*?)</item>", re.S)


def parse_items(text: str) -> list[str]:
    """The unique, stripped <item> texts of a reply (or a rubric file), in order.

    >>> parse_items("<item> clear </item> x <item>cites sources</item><item>clear</item>")
    ['clear', 'cites sources']
    """
    return list(dict.fromkeys(t for t in (" ".join(m.split()) for m in _ITEM.findall(text)) if t))


@register_reward("mpo")
class MpoReward(JudgeHolder):
    """A rubric judge (sum of per-item scores) refined by a meta-judge every `interval` calls.

    rubric:        the initial rubric: a list of criteria, or text / a file with <item>...</item> criteria
    backend:       the judge's backend; meta_backend: the meta-judge's (default: the same)
    interval (10), samples (20): MPOConfig's num_mpo_interval / num_mpo_samples; max_items (10)
    rubric_dir:    where iterations are written (and the newest read back at start); null: not written
    template (ITEM_TEMPLATE; fields {prompt}, {completion}, {answer} = the criterion), parser (labeled_number),
    max_new_tokens (300), temperature (0.02, the reference's), meta_max_new_tokens (1024), cache options.
    """

    def __init__(self, rubric: Any, backend: Any, meta_backend: Any = None, interval: int = 10, samples: int = 20,
                 max_items: int = 10, rubric_dir: str | None = None, template: str = ITEM_TEMPLATE,
                 parser: Any = "labeled_number", max_new_tokens: int = 300, temperature: float = 0.02,
                 meta_max_new_tokens: int = 1024, parse_retries: int = 0, cache_size: int = 8192,
                 cache_file: str | None = None):
        if int(interval) < 1 or int(samples) < 1 or int(max_items) < 1:
            raise ValueError("mpo: interval, samples and max_items must be >= 1")
        self.judge = Judge(backend, template, parser, max_new_tokens=max_new_tokens, temperature=temperature,
                           parse_retries=parse_retries, cache_size=cache_size, cache_file=cache_file)
        if not {"completion", "answer"} <= self.judge.template.fields:
            raise ValueError("mpo: the item template needs {completion} and {answer} (the criterion)")
        self.meta = self.judge.backend if meta_backend is None else build_backend(meta_backend)
        items = self._initial(rubric)
        self.rubric_dir = None if rubric_dir is None else Path(rubric_dir).expanduser()
        self.iteration = 0
        if self.rubric_dir is not None and self.rubric_dir.is_dir():
            done = sorted(self.rubric_dir.glob("iter_*.txt"), key=lambda p: int(p.stem.split("_")[1]))
            if done:  # a resumed run continues from its newest rubric
                items, self.iteration = parse_items(done[-1].read_text()), int(done[-1].stem.split("_")[1])
        self.items = items
        self.interval, self.samples, self.max_items = int(interval), int(samples), int(max_items)
        self.meta_max_new_tokens = int(meta_max_new_tokens)
        self.calls = 0
        self.last: list[dict] = []
        self.__name__ = "mpo"

    @property
    def in_process(self) -> bool:  # the rubric is state: one copy, in the trainer's process
        return True

    @staticmethod
    def _initial(rubric) -> list[str]:
        if isinstance(rubric, list):
            items = [" ".join(str(x).split()) for x in rubric if str(x).strip()]
        elif isinstance(rubric, str):
            path = Path(rubric).expanduser()
            text = path.read_text() if "<item>" not in rubric and path.suffix in (".txt", ".md") and path.is_file() else rubric
            items = parse_items(text)
        else:
            items = []
        if not items:
            raise ValueError("mpo: rubric must be a non-empty list of criteria, or text / a .txt file with <item>...</item> ones")
        return items

    def rubric_text(self) -> str:
        return "\n".join(f"<item>{x}</item>" for x in self.items)

    def _write(self) -> None:
        if self.rubric_dir is None:
            return
        self.rubric_dir.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.rubric_dir, prefix=".iter_")
        with os.fdopen(fd, "w") as f:
            f.write(self.rubric_text() + "\n")
        os.replace(tmp, self.rubric_dir / f"iter_{self.iteration}.txt")

    def _ask_meta(self, prompts: list[str]) -> list[str]:
        reqs = [JudgeRequest((("user", p),), self.meta_max_new_tokens, self.judge.temperature, 1.0, (), None, 0) for p in prompts]
        return [r.text or "" for r in self.meta.complete(reqs)]

    def refine(self, rows: list[dict]) -> bool:
        """One meta-judge update from scored rows ({prompt, completion, score}); True if the rubric changed."""
        rubric = self.rubric_text()
        replies = self._ask_meta([META_PROMPT.format(rubric=rubric, **r) for r in rows[:self.samples]])
        proposals = [x for reply in replies for x in parse_items(reply)]
        if not proposals:
            return False
        listing = "\n".join(f"<item>{x}</item>" for x in dict.fromkeys(proposals))
        merged = parse_items(self._ask_meta([MERGE_PROMPT.format(max_items=self.max_items, proposals=listing)])[0])
        merged = merged[:self.max_items]
        if not merged or merged == self.items:
            return False
        self.items, self.iteration = merged, self.iteration + 1
        self._write()
        return True

    def __call__(self, prompts, completions, **_) -> RewardOutput:
        if self.calls and self.calls % self.interval == 0 and self.last:
            self.refine(self.last)
        self.calls += 1
        queries, texts = [prompt_text(p) for p in prompts], [completion_text(c) for c in completions]
        fields = [{"prompt": q, "completion": t, "answer": item} for q, t in zip(queries, texts) for item in self.items]
        values, why, stats = self.judge.ask(fields)
        k = len(self.items)
        scores = [sum(v or 0.0 for v in values[i * k:(i + 1) * k]) for i in range(len(texts))]
        self.last = [{"prompt": q, "completion": t, "score": s} for q, t, s in zip(queries, texts, scores)]
        metrics = judge_metrics(stats, why, len(texts))
        metrics.update(rubric_iter=[float(self.iteration)], rubric_items=[float(k)],
                       item_fail_frac=[float(v is None) for v in values])
        return RewardOutput(scores, metrics)
