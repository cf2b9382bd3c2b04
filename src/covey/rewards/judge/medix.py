r"""`medix`: MediX-R1's composite reward (arXiv 2602.23363): an LLM judge, an embedding match, the image
modality and the format, in one score.

Checked against the authors' code: mbzuai-oryx/MediX-R1 99994cc,
``training/examples/reward_function/medical.py::compute_score``:

    text      = the completion with whitespace around "<", ">" and "/" removed
    format    = 1 if text from the first "<thinking>" fully matches <thinking>.*?</thinking>\s*<answer>.*?</answer>
    given     = the first <answer>...</answer> content (else the whole text), stripped, then stripped of "."
    gt        = the part of the ground truth after its first ">" (the modality tag "<...>" before it), stripped of "."
    invalid   = given == "" or len(given) == 1 or it contains "__", ":" or "?"       -> both accuracy terms 0
    acc_llm   = 1 if given == gt else judge(yes_no_match, medix_compat YES rule, max_tokens 4, temperature 0)
    acc_embed = 1 if given == gt else 1[cos(embed(given), embed(gt)) >= threshold (0.8)]
    modality  = 1 if the text before "<thinking>" equals the gt's "<...>" tag, case-insensitively (0 without <thinking>)
    overall   = (1 - fw) (0.575 acc_llm + 0.375 acc_embed + 0.05 modality) + fw format,   fw = format_weight (0.1)

A ground truth without ">" makes the reference raise inside its try: both accuracy terms 0 (kept). A judge
failure: 0 (the reference's `except`: on_fail zero). The embedder: `embedder: {model: NAME, threshold: 0.8}`
loads sentence-transformers (an optional dependency; the reference uses abhinand/MedEmbed-large-v0.1), or
any object with ``encode(list[str]) -> vectors`` from the Python API; there is no default (the composite is
not MediX's without it). Metrics: format, accuracy_llm, accuracy_embed, modality (per sample), judge metrics.
"""

from __future__ import annotations

import math
import re
from typing import Any

from covey.rewards._scoring import RewardOutput
from covey.rewards.judge.core import Judge, JudgeHolder
from covey.rewards.judge.reward import judge_metrics
from covey.rewards.math import completion_text
from covey.rewards.registry import register_reward

__all__ = ["MedixReward", "medix_parts"]

_FORMAT = re.compile(r"<thinking>.*?</thinking>\s*<answer>.*?</answer>", re.DOTALL)
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
WEIGHTS = (0.575, 0.375, 0.05)  # acc_llm, acc_embed, modality


def medix_parts(response: str, ground_truth: str) -> dict[str, Any]:
    """The judge-free parts: format, modality, and (given, gt, invalid, exact) for the accuracy terms.

    >>> p = medix_parts("<CT> <thinking>a lesion</thinking> <answer>Glioma.</answer>", "<ct>glioma")
    >>> p["format"], p["modality"], p["given"], p["gt"], p["exact"]
    (1.0, 1.0, 'Glioma', 'glioma', False)
    """
    text = re.sub(r"\s*(<|>|/)\s*", r"\1", response)
    idx = text.find("<thinking>")
    fmt = 1.0 if idx != -1 and _FORMAT.fullmatch(text[idx:].strip()) else 0.0
    modality = 0.0
    if idx != -1:
        modality = float(text[:idx].strip().upper() == (ground_truth.split(">", 1)[0] + ">").upper())
    m = _ANSWER.search(text)
    given = (m.group(1).strip() if m else text.strip()).strip(".")
    if ">" not in ground_truth:
        return {"format": fmt, "modality": modality, "given": given, "gt": None, "invalid": True, "exact": False}
    gt = ground_truth.split(">", 1)[1].strip().strip(".")
    invalid = given == "" or len(given) == 1 or any(s in given for s in ("__", ":", "?"))
    return {"format": fmt, "modality": modality, "given": given, "gt": gt, "invalid": invalid,
            "exact": not invalid and given == gt}


def _cosine(u, v) -> float:
    dot = sum(float(a) * float(b) for a, b in zip(u, v))
    nu, nv = math.sqrt(sum(float(a) ** 2 for a in u)), math.sqrt(sum(float(b) ** 2 for b in v))
    return dot / (nu * nv) if nu and nv else 0.0


class _SentenceEmbedder:
    def __init__(self, model: str):
        try:
            import sentence_transformers  # noqa: F401
        except ImportError:
            raise ValueError("medix: embedder.model needs the sentence-transformers package (pip install "
                             "sentence-transformers), which covey does not install") from None
        self.model_name, self._model = model, None

    def encode(self, texts: list[str]):
        if self._model is None:
            from sentence_transformers import SentenceTransformer

            self._model = SentenceTransformer(self.model_name, trust_remote_code=True)
        return self._model.encode(texts)


@register_reward("medix")
class MedixReward(JudgeHolder):
    """MediX-R1's overall reward (module docstring).

    backend: the YES/NO judge's (the reference: Qwen3-4B-Instruct-2507 behind vLLM); answer_column (answer,
    "<modality>answer"); embedder: {model: NAME, threshold: 0.8} or an object with `encode`; format_weight (0.1);
    the judge's decoding / cache options as for the `judge` reward (template yes_no_match, parser
    {name: yes_no, medix_compat: true}, max_new_tokens 4, temperature 0, parse_retries 0).
    """

    def __init__(self, backend: Any, embedder: Any = None, answer_column: str = "answer", format_weight: float = 0.1,
                 template: str = "yes_no_match", parser: Any = None, max_new_tokens: int = 4, temperature: float = 0.0,
                 parse_retries: int = 0, cache_size: int = 8192, cache_file: str | None = None):
        if embedder is None:
            raise ValueError("medix: give an embedder ({model: abhinand/MedEmbed-large-v0.1, threshold: 0.8}); MediX-R1's "
                             "composite has an embedding-match term")
        if not 0.0 <= float(format_weight) <= 1.0:
            raise ValueError(f"medix: format_weight must be in [0, 1], got {format_weight}")
        threshold = 0.8
        if isinstance(embedder, dict):
            spec = dict(embedder)
            threshold = float(spec.pop("threshold", 0.8))
            if set(spec) != {"model"}:
                raise ValueError("medix: embedder must be {model: NAME, threshold: 0.8}")
            embedder = _SentenceEmbedder(spec["model"])
        elif not hasattr(embedder, "encode"):
            raise ValueError("medix: embedder must be {model: NAME} or an object with encode(list[str])")
        self.embedder, self.threshold = embedder, threshold
        self.judge = Judge(backend, template, parser or {"name": "yes_no", "medix_compat": True},
                           max_new_tokens=max_new_tokens, temperature=temperature, parse_retries=parse_retries,
                           cache_size=cache_size, cache_file=cache_file)
        self.answer_column, self.fw = answer_column, float(format_weight)
        self.__name__ = "medix"

    def __call__(self, prompts, completions, **columns) -> RewardOutput:
        truth = columns.get(self.answer_column)
        if truth is None:
            raise ValueError(f"medix needs the ground truth column {self.answer_column!r}; the batch has {sorted(columns)}")
        parts = [medix_parts(completion_text(c), "" if t is None else str(t)) for c, t in zip(completions, truth)]
        ask = [i for i, p in enumerate(parts) if not p["invalid"] and not p["exact"]]
        values, why, stats = self.judge.ask([{"completion": parts[i]["given"], "answer": parts[i]["gt"], "prompt": ""}
                                             for i in ask]) if ask else ([], [], {})
        llm = [float(p["exact"]) for p in parts]
        emb = list(llm)
        for i, v in zip(ask, values):
            llm[i] = 0.0 if v is None else float(v)  # the reference's except -> 0.0
        if ask:
            vecs = self.embedder.encode([t for i in ask for t in (parts[i]["given"], parts[i]["gt"])])
            for k, i in enumerate(ask):
                emb[i] = float(_cosine(vecs[2 * k], vecs[2 * k + 1]) >= self.threshold)
        w_llm, w_emb, w_mod = WEIGHTS
        scores = [(1 - self.fw) * (w_llm * a + w_emb * e + w_mod * p["modality"]) + self.fw * p["format"]
                  for a, e, p in zip(llm, emb, parts)]
        metrics = judge_metrics(stats, why, len(parts)) if ask else {}
        metrics.update(format=[p["format"] for p in parts], accuracy_llm=llm, accuracy_embed=emb,
                       modality=[p["modality"] for p in parts])
        return RewardOutput(scores, metrics)
