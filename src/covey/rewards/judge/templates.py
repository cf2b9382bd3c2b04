r"""Judge prompt templates: built-ins in the papers' own wording, and user templates.

A template is a `str.format` string (literal braces doubled, ``\boxed{{}}``) rendered into ONE user
message, optionally after a system message. Fields: ``{prompt}`` (the last user message of the task
prompt, or the text prompt), ``{completion}`` (the completion text), ``{answer}`` (the item column
named by the judge's `reference_column`), and for pairwise templates ``{a}`` / ``{b}`` (the two
completions). A user template is either such a string (it must contain at least one ``{field}``) or the
path of a text file holding one (``*.txt`` / ``*.md`` / ``*.jinja``-free plain text).

Built-ins:
  yes_no_match      MediX-R1's judge prompt verbatim (mbzuai-oryx/MediX-R1 99994cc,
                    training/examples/reward_function/medical.py::create_prompt), with the predicted
                    answer = the completion and the ground truth = {answer}; one user message.
  step_error_index  FAPO's GenRM prompt ``QUERY_TEMPLATE_PRM_GT`` verbatim (yyDing1/FAPO 746aa64,
                    fapo/fapo_reasoning/reward_fn.py); one user message; read with `boxed_int`.
  pairwise_scores   ArenaRL's user-message layout (Alibaba-NLP/qqr 27027c3,
                    examples/travel/reward_model.py: <USER_QUERY>, <Answer_A>, <Answer_B>; the tool
                    trajectories <PATH_A>/<PATH_B> are left out for single-turn completions) after a
                    system message in covey's own words asking for ArenaRL's JSON output format (the
                    released system prompt is a travel-planning rubric, not reused); read with `json_pair`.
  score_0_10        covey's own wording: a 0-10 quality score; read with `number_in_range`.
  pairwise_total_10 covey's wording of Writing-Zero's pairwise GenRM setup (arXiv 2506.00103; its prompt
                    is not published): writing principles first, a short critique, then two scores that
                    sum to 10, in ArenaRL's JSON format so `json_pair` reads them (`writing_zero`).
"""

from __future__ import annotations

import hashlib
import string
from dataclasses import dataclass
from pathlib import Path

__all__ = ["BUILTIN_TEMPLATES", "Template", "get_template"]

FIELDS = ("prompt", "completion", "answer", "a", "b")


@dataclass(frozen=True)
class Template:
    name: str
    user: str
    system: str | None = None

    @property
    def fields(self) -> frozenset[str]:
        return frozenset(f for _, f, _, _ in string.Formatter().parse(self.user) if f)

    @property
    def pairwise(self) -> bool:
        return {"a", "b"} <= self.fields

    @property
    def sha256(self) -> str:
        return hashlib.sha256(f"{self.system}\x00{self.user}".encode()).hexdigest()

    def messages(self, **values: str) -> list[dict[str, str]]:
        msgs = [{"role": "system", "content": self.system}] if self.system else []
        return msgs + [{"role": "user", "content": self.user.format(**values)}]


_MEDIX = (
    "You are a helpful assistant.\n"
    'Given a predicted answer and the ground truth answer, respond with exactly "YES" if the content matches, '
    'otherwise respond with "NO".\n'
    'Start your response with "YES" or "NO" in uppercase.\n'
    "\n"
    "Predicted:{completion}\n"
    "Ground Truth:{answer}\n"
)
_FAPO = (
    "The following is a math problem with its ground truth answer, along with an AI solution (split into steps):\n\n"
    "[Math Problem]\n\n"
    "{prompt}\n\n"
    "[Ground Truth]\n\n"
    "{answer}\n\n"
    "[AI Solution]\n\n"
    "{completion}\n\n"
    "Your task is to review and critique the solution step by step. Once you identify an error in a step, return the "
    "index of the step where the earliest error occurs. Otherwise, return the index of -1 (which typically denotes "
    "'not found').\n\n"
    "Please reason step by step, put your final answer (i.e., the index) in \\boxed{{}}."
)
_ARENA_SYSTEM = (
    "You are an impartial judge comparing two answers (Agent_A and Agent_B) to the same user query. Judge "
    "correctness, helpfulness and clarity; do not let the order of the answers or their length sway you. Score each "
    "answer from 0 to 10 and reply with JSON only, in this format:\n"
    '{"combined_scores": {"Agent_A": <score>, "Agent_B": <score>}, "winner": "Agent_A" | "Agent_B" | "Tie"}'
)
_ARENA_USER = "<USER_QUERY>\n{prompt}\n</USER_QUERY>\n\n<Answer_A>\n{a}\n</Answer_A>\n\n<Answer_B>\n{b}\n</Answer_B>"
_SCORE = (
    "Rate the quality of the answer below to the question, from 0 (useless or wrong) to 10 (perfect). Reply with the "
    "number only.\n\n[Question]\n{prompt}\n\n[Answer]\n{completion}\n"
)

_WZ_SYSTEM = (
    "You are a strict writing judge. First state two or three principles that a great answer to this request must "
    "follow. Then critique Answer A and Answer B against those principles, briefly. Finally divide a total of 10 "
    "points between the two answers (the better one gets more; 5 and 5 only when they are truly equal); ignore the "
    "order in which they are shown. End with JSON only, in this format:\n"
    '{"combined_scores": {"Agent_A": <score>, "Agent_B": <score>}}'
)

BUILTIN_TEMPLATES = {
    "yes_no_match": Template("yes_no_match", _MEDIX),
    "step_error_index": Template("step_error_index", _FAPO),
    "pairwise_scores": Template("pairwise_scores", _ARENA_USER, _ARENA_SYSTEM),
    "score_0_10": Template("score_0_10", _SCORE),
    "pairwise_total_10": Template("pairwise_total_10", _ARENA_USER, _WZ_SYSTEM),
}


def get_template(spec: str, system: str | None = None) -> Template:
    """A built-in name, a file path, or a template string; checked now (unknown fields, no field at all)."""
    if spec in BUILTIN_TEMPLATES:
        if system is not None:
            raise ValueError(f"judge: template {spec!r} is a built-in; template_system applies to user templates only")
        return BUILTIN_TEMPLATES[spec]
    path = Path(spec).expanduser()
    looks_like_path = "{" not in spec and ("/" in spec or path.suffix in (".txt", ".md"))
    if looks_like_path:
        if not path.is_file():
            raise ValueError(f"judge: template file {spec!r} does not exist (built-ins: {', '.join(BUILTIN_TEMPLATES)})")
        text, name = path.read_text(), path.name
    else:
        text, name = spec, "custom"
    try:
        fields = [f for _, f, _, _ in string.Formatter().parse(text) if f is not None]
    except ValueError as e:
        raise ValueError(f"judge: template {name!r} is not a valid format string ({e}); write literal braces as {{{{ }}}}") from None
    if not any(fields):
        raise ValueError(f"judge: template {spec[:60]!r} is neither a built-in ({', '.join(BUILTIN_TEMPLATES)}), a file, "
                         "nor a template with {prompt} / {completion} / {answer} fields")
    unknown = sorted({f for f in fields if f} - set(FIELDS))
    if unknown:
        raise ValueError(f"judge: template {name!r} has unknown field(s) {unknown}; allowed: {', '.join(FIELDS)}")
    return Template(name, text, system)
