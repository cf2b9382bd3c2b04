"""Causal-reasoning queries on random discrete structural causal models, with the total-variation reward.

Reproduces the task of "Generalization of RLVR Using Causal Reasoning" (arXiv 2512.20760), checked
against its released code, zhichul/rlcausal @ d9d613246e3b3b4f459870f476703af9b4b0426a: `data_generation/{dag,causal_graph}.py`
(graph and CPT sampling), `data_generation/levels/{observational,interventional,counterfactual}.py`
(queries, the twin network), `data_generation/configs/rl/*.yaml` (prompts) and
`training/rlvr/score_strict.py` (the reward), `training/rlvr/train_rlvr.sh` (trains on its strict
`score`: verl's `dapo` reward manager reads `result["score"]`). Exact answers are computed by enumerating the joint
distribution (the released code runs min-fill variable elimination, which gives the same numbers);
graphs are small (default 4 variables), as suits tiny models on a CPU.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass

import numpy as np

from covey.tasks._common import check_split, completion_text
from covey.tasks.registry import register_task

__all__ = ["CausalSCM", "SCM", "answer_distribution", "causal_reward", "parse_answer", "query_distribution",
           "sample_scm", "tvd"]

LEVELS = ("observational", "interventional", "counterfactual")

# zhichul/rlcausal data_generation/configs/rl/*.yaml, prompt.system and prompt.user (verbatim)
SYSTEM = (
    "You are an expert on graphical models and causal inference. You task is to compute probability queries "
    "over a structural causal model.\n\nFormat your solution as follows:\n  THOUGHT PROCESS\n  All intermediate "
    "steps of analysis, reasoning, and computation.\n\n  ANSWER\n  Only state your final answer to the query, "
    "via a list of numbers such as [0.1, 0.7, 0.2] or [0.1, 0.9]. Round you answer to the nearest two digits."
)
USER = (
    "Here's a structural causal model over discrete random variables. The Variables are {var_names}. Here are "
    "the Values they can take on.\n\n{values}\n\nHere's the causal directed acyclic graph (DAG):\n\n{graph}\n\n"
    "Here are the causal conditional probability tables (CPT) associated with the DAG:\n\n{cpts}\n\n"
    "Here's your {question}\n\n----------\n\nNow start your solution process. Be precise."
)
# prompt "compact" (covey's): the same model, CPTs and question in a few hundred characters, so that the
# character-level tiny models (1,024 positions) can take it; the released prompt is 1,000-1,500 tokens there
SYSTEM_COMPACT = "Compute the probability query on the causal model. End with ANSWER [p1, p2, ...] rounded to two digits."
USER_COMPACT = "Variables {var_names}; {values}.\nEdges: {edges}\nCPTs:\n{cpts}\nQuestion: {question}"
PROMPTS = ("released", "compact")
# score_strict.py: "ANSWER" then a bracketed list of numbers separated by a comma and whitespace
_ANSWER_RE = re.compile(r"ANSWER\s*\[(((\-?[0-9\.])+,\s+)*((\-?[0-9\.])+))\]")
STRICT_THRESHOLD = 0.01


# --- the reward (score_strict.py) -----------------------------------------------------------------


def parse_answer(text: str) -> list[float] | None:
    """The first ``ANSWER [p1, p2, ...]`` list in the text, or None (no match, or a number that does not parse).

    >>> parse_answer("THOUGHT ... ANSWER [0.25, 0.75]"), parse_answer("ANSWER [0.25,0.75]")
    ([0.25, 0.75], None)
    """
    match = _ANSWER_RE.search(text)
    if match is None:
        return None
    try:
        return [float(s) for s in match.group(1).split(",")]
    except ValueError:
        return None


def tvd(p, q) -> float:
    """Total-variation distance sum |p_i - q_i| / 2 of two equally long lists."""
    if len(p) != len(q):
        raise ValueError(f"tvd of lists of lengths {len(p)} and {len(q)}")
    return float(np.abs(np.asarray(p, dtype=float) - np.asarray(q, dtype=float)).sum() / 2)


def causal_reward(text: str, reference) -> tuple[float, float]:
    """(reward, score) of one completion against the reference distribution, as `score_strict.compute_score`.

    reward = 0.1 for a parsed answer + 0.1 for the right length + 0.8 * max(1 - TVD, 0);
    score (the paper's correctness) = 0.1 + 0.1 + 0.8 * [TVD < 0.01]; no answer gives (0, 0).

    >>> causal_reward("ANSWER [0.1, 0.9]", [0.2, 0.8])
    (0.92, 0.2)
    """
    answer = parse_answer(text)
    if answer is None:
        return 0.0, 0.0
    if len(answer) != len(reference):
        return 0.1, 0.1
    distance = tvd(answer, reference)
    reward = 0.2 + 0.8 * max(1.0 - distance, 0.0)
    return round(reward, 12), (1.0 if distance < STRICT_THRESHOLD else 0.2)


# --- structural causal models ----------------------------------------------------------------------


@dataclass
class SCM:
    """A discrete SCM: variable j takes values 0..n_vals[j]-1 with P(x_j | parents) = cpts[j][x_parents][x_j].

    Variables are indexed in a topological order (every parent index is smaller than its child's).
    """

    n_vals: list[int]
    parents: list[list[int]]
    cpts: list[np.ndarray]  # cpts[j].shape == (*(n_vals[p] for p in parents[j]), n_vals[j])

    @property
    def n_vars(self) -> int:
        return len(self.n_vals)

    def descendants(self, j: int) -> set[int]:
        out: set[int] = set()
        for c in range(j + 1, self.n_vars):
            if any(p == j or p in out for p in self.parents[c]):
                out.add(c)
        return out


def sample_scm(rng: np.random.Generator, n_vars: int, n_vals: int) -> SCM:
    """rlcausal `sample_dag` + `sample_causal_graph`: the first m ~ U{1..n_vars-1} variables have no parent,
    each later variable j has min(j, U{1, 2}) parents drawn from the variables before it, and each CPT row
    is a flat Dirichlet draw."""
    n_indep = int(rng.integers(1, n_vars))
    parents: list[list[int]] = [[] for _ in range(n_vars)]
    for j in range(n_indep, n_vars):
        parents[j] = sorted(rng.choice(j, size=min(j, int(rng.integers(1, 3))), replace=False).tolist())
    vals = [n_vals] * n_vars
    cpts = []
    for j in range(n_vars):
        shape = [vals[p] for p in parents[j]]
        rows = int(np.prod(shape)) if shape else 1
        cpts.append(rng.dirichlet(np.ones(vals[j]), size=rows).reshape(*shape, vals[j]))
    return SCM(vals, parents, cpts)


def _assignments(scm: SCM) -> np.ndarray:
    """Every joint assignment, shape (prod(n_vals), n_vars)."""
    return np.array(list(itertools.product(*(range(v) for v in scm.n_vals))), dtype=np.int64).reshape(-1, scm.n_vars)


def _factor(scm: SCM, j: int, x: np.ndarray) -> np.ndarray:
    """P(x_j | x_parents) for every row of x."""
    return scm.cpts[j][tuple(x[:, p] for p in scm.parents[j]) + (x[:, j],)]


def query_distribution(scm: SCM, level: str, k: int, *, observed: tuple[int, int] | None = None,
                       intervened: tuple[int, int] | None = None) -> np.ndarray:
    """The exact distribution of x_k for one query (unrounded).

    observational: P(x_k | x_o = v);  interventional: P(x_k | do(x_i = v));
    counterfactual: P(x'_k | x_o = v) in the world where x_i was set to v' — the twin network of
    rlcausal `to_twin_graph`: every variable has a response function r_j (one value per parent
    setting, drawn independently from the CPT rows), shared by the factual x and the counterfactual
    x', so P(x_j = a, x'_j = b | pa, pa') = P(a | pa) [a = b] when pa = pa', else P(a | pa) P(b | pa').
    """
    x = _assignments(scm)
    if level == "observational":
        o, v = observed
        weight = np.prod([_factor(scm, j, x) for j in range(scm.n_vars)], axis=0) * (x[:, o] == v)
        out = np.bincount(x[:, k], weights=weight, minlength=scm.n_vals[k])
    elif level == "interventional":
        i, v = intervened
        weight = np.prod([_factor(scm, j, x) if j != i else (x[:, j] == v) for j in range(scm.n_vars)], axis=0)
        out = np.bincount(x[:, k], weights=weight, minlength=scm.n_vals[k])
    elif level == "counterfactual":
        (o, v), (i, w) = observed, intervened
        a, b = (m.reshape(-1) for m in np.meshgrid(np.arange(len(x)), np.arange(len(x)), indexing="ij"))
        fx, cx = x[a], x[b]  # factual and counterfactual assignment of every pair
        weight = (fx[:, o] == v).astype(float)
        for j in range(scm.n_vars):
            factual = _factor(scm, j, fx)
            if j == i:
                weight = weight * factual * (cx[:, j] == w)
                continue
            same = np.all(fx[:, scm.parents[j]] == cx[:, scm.parents[j]], axis=1) if scm.parents[j] else np.ones(len(fx), bool)
            twin = np.where(same, fx[:, j] == cx[:, j], _factor(scm, j, cx))
            weight = weight * factual * twin
        out = np.bincount(cx[:, k], weights=weight, minlength=scm.n_vals[k])
    else:
        raise ValueError(f"unknown level {level!r}; allowed: {', '.join(LEVELS)}")
    total = out.sum()
    if total <= 0:
        raise ValueError("the query conditions on an event of probability 0")
    return out / total


def _ancestors(scm: SCM, nodes: set[int], cut: int | None = None) -> set[int]:
    """The nodes and their ancestors (the edges into `cut` removed: an intervention)."""
    out, todo = set(nodes), list(nodes)
    while todo:
        j = todo.pop()
        for p in ([] if j == cut else scm.parents[j]):
            if p not in out:
                out.add(p)
                todo.append(p)
    return out


def ancestor_size(scm: SCM, level: str, k: int, observed=None, intervened=None) -> int:
    """rlcausal's difficulty (`ancestor_size`): the nodes of the query's relevant subgraph — the query and
    the observed variable with their ancestors (after the intervention's graph surgery); 1 when the query
    is the observed / intervened variable. Counterfactual: counted in the twin network (response-function,
    factual and counterfactual node per variable), as the released code does."""
    if level == "observational":
        o = observed[0]
        return 1 if k == o else len(_ancestors(scm, {k, o}))
    if level == "interventional":
        i = intervened[0]
        return 1 if k == i else len(_ancestors(scm, {k}, cut=i))
    o, i = observed[0], intervened[0]
    if k == i:
        return 1
    # twin-network ancestors of x'_k (edges into x'_i cut) and of x_o: a response node r_j for every
    # counterfactual or factual node j reached, plus those nodes
    twin = _ancestors(scm, {k}, cut=i)
    factual = _ancestors(scm, {o})
    responses = (twin - {i}) | factual
    return len(twin) + len(factual) + len(responses)


# --- prompts -----------------------------------------------------------------------------------


def _round(p: np.ndarray) -> list[float]:
    return [float(x) for x in np.asarray(p).round(2)]


def describe(scm: SCM, names: list[str]) -> dict[str, str]:
    """The prompt's variables, values, graph and CPT text (rlcausal `values_to_str`, `parametrization_to_str`;
    the graph as DOT text, nodes and edges sorted by name, as networkx's `write_dot` lists them)."""
    order = sorted(range(scm.n_vars), key=lambda j: names[j])
    values = "\n".join(f"{names[j]} can take values in {list(range(scm.n_vals[j]))}" for j in order)
    edges = sorted((names[p], names[j]) for j in range(scm.n_vars) for p in scm.parents[j])
    graph = "strict digraph  {\n" + "".join(f"{names[j]};\n" for j in order) + "".join(f"{a} -> {b};\n" for a, b in edges) + "}"
    lines = []
    for j in range(scm.n_vars):
        lines.append(f"CPTs for {names[j]}:")
        pa = scm.parents[j]
        for setting in itertools.product(*(range(scm.n_vals[p]) for p in pa)):
            row = _round(scm.cpts[j][setting])
            if pa:
                cond = ",".join(f"{names[p]}={s}" for p, s in zip(pa, setting))
                lines.append(f"P({names[j]} | {cond}) = {row}")
            else:
                lines.append(f"P({names[j]}) = {row}")
        lines.append("")
    return {"var_names": ", ".join(f"v{i}" for i in range(scm.n_vars)), "values": values, "graph": graph,
            "cpts": "\n".join(lines)}


def describe_compact(scm: SCM, names: list[str]) -> dict[str, str]:
    """The compact prompt's text (`prompt: compact`): the same variables, edges and rounded CPTs, one line each."""
    order = sorted(range(scm.n_vars), key=lambda j: names[j])
    same = len(set(scm.n_vals)) == 1
    values = (f"each takes values in {list(range(scm.n_vals[0]))}" if same
              else ", ".join(f"{names[j]} in {list(range(scm.n_vals[j]))}" for j in order))
    edges = ", ".join(sorted(f"{names[p]}->{names[j]}" for j in range(scm.n_vars) for p in scm.parents[j])) or "none"
    lines = []
    for j in order:
        pa = scm.parents[j]
        for setting in itertools.product(*(range(scm.n_vals[p]) for p in pa)):
            cond = "|" + ",".join(f"{names[p]}={s}" for p, s in zip(pa, setting)) if pa else ""
            lines.append(f"P({names[j]}{cond})={_round(scm.cpts[j][setting])}")
    return {"var_names": ", ".join(names[j] for j in order), "values": values, "edges": edges, "cpts": "\n".join(lines)}


def answer_distribution(item: dict) -> list[float]:
    """The reference distribution of an item (rounded to two digits, as the released data)."""
    return list(item["reference"])


@register_task("causal")
class CausalSCM:
    """Probability queries on random discrete SCMs: observational, interventional and counterfactual.

    Each problem lists the variables, their values, the DAG and every CPT (rounded to two digits in
    the text; answers are computed from the unrounded tables, as in the released data) and asks for
    the distribution of one variable: given an observation x_o = v (observational), after setting
    x_i := v (interventional, i never the last variable), or given an observation x_o = v downstream
    of (or equal to) x_i and then setting x_i := v' (counterfactual). Observed values come from a
    sample of the model; intervention values are uniform.

    Answer format: ``ANSWER [p1, p2, ...]`` (a comma and a space between numbers). `metric="score"`
    (default) is the paper's correctness 0.1 + 0.1 + 0.8·[TVD < 0.01], what the released launcher trains
    on (`train_rlvr.sh` with `reward_manager=dapo`, which takes `compute_score(...)["score"]`) and what
    `covey eval`'s pass@k counts as solved (≥ 1). `metric="reward"` is the dense 0.1 for an answer + 0.1
    for the right length + 0.8·max(1 − TVD, 0) (covey's default before round two).

    `prompt="released"` (default) is the released system and user prompt verbatim: 1,000-1,500 tokens for
    4 variables with the character-level tiny models, over their 1,024 positions. `prompt="compact"` states
    the same model, CPTs and question in a few hundred characters (covey's variant, for tiny models).

    >>> task = CausalSCM(n_train=0, n_test=3, chat=False)
    >>> item = task.examples("test")[0]
    >>> item["level"], item["answer"] == str(item["reference"])
    ('observational', True)
    >>> task.reward([item["prompt"]] * 2, ["ANSWER " + item["answer"], "no idea"], reference=[item["reference"]] * 2)
    [1.0, 0.0]
    >>> CausalSCM(n_train=0, n_test=1, chat=False, prompt="compact").examples("test")[0]["prompt"][:20]
    'Compute the probabil'

    Params: `n_vars` (2–8, default 4), `n_vals` (2–4, default 2), `levels` (any of observational,
    interventional, counterfactual; questions cycle through them), `questions_per_model` (default 10,
    the released dev split's), `n_train`/`n_test` (questions), `seed`, `metric`, `chat` (a system and
    a user message, else the two joined), `prompt`. The test split comes from its own seeded stream.
    Item: ``{"id", "prompt", "answer" (the reference as text), "reference", "level", "ancestor_size",
    "n_vars"}`` — evaluate with ``--by level`` or ``--by ancestor_size`` for the paper's grid.
    """

    name = "causal"
    answer_format = "A final 'ANSWER [p1, p2, ...]' with the distribution rounded to two digits, e.g. ANSWER [0.3, 0.7]."

    def __init__(self, *, n_vars: int = 4, n_vals: int = 2, levels=LEVELS, questions_per_model: int = 10,
                 n_train: int = 2000, n_test: int = 200, seed: int = 0, metric: str = "score", chat: bool = True,
                 prompt: str = "released"):
        if not 2 <= n_vars <= 8 or not 2 <= n_vals <= 4 or n_vals ** (2 * n_vars) > 2**20:
            raise ValueError(f"need 2 <= n_vars <= 8, 2 <= n_vals <= 4 and n_vals**(2*n_vars) <= 2**20 "
                             f"(exact counterfactuals enumerate pairs of worlds), got n_vars={n_vars}, n_vals={n_vals}")
        levels = [levels] if isinstance(levels, str) else list(levels)
        if not levels or any(lv not in LEVELS for lv in levels):
            raise ValueError(f"levels must list some of {', '.join(LEVELS)}, got {levels}")
        if questions_per_model < 1 or n_train < 0 or n_test < 0:
            raise ValueError(f"need questions_per_model >= 1 and n_train, n_test >= 0, got "
                             f"{questions_per_model}, {n_train}, {n_test}")
        if metric not in ("reward", "score"):
            raise ValueError(f"metric must be 'reward' or 'score', got {metric!r}")
        if prompt not in PROMPTS:
            raise ValueError(f"prompt must be one of {', '.join(PROMPTS)}, got {prompt!r}")
        self.n_vars, self.n_vals, self.levels = n_vars, n_vals, tuple(levels)
        self.questions_per_model, self.n_train, self.n_test = questions_per_model, n_train, n_test
        self.seed, self.metric, self.chat, self.prompt = seed, metric, chat, prompt
        self._cache: dict[str, list[dict]] = {}

    def examples(self, split: str = "train") -> list[dict]:
        check_split(self.name, split)
        if split not in self._cache:
            count = self.n_test if split == "test" else self.n_train
            stream = np.random.default_rng([self.seed, 0 if split == "test" else 1, 2512_20760])
            self._cache[split] = self._draw(count, stream)
        return self._cache[split]

    def demonstration(self, item: dict) -> str:
        return f"ANSWER {item['answer']}"

    def extract_answer(self, completion) -> str | None:
        answer = parse_answer(completion_text(completion))
        return None if answer is None else str(answer)

    def reward(self, prompts, completions, reference, **_) -> list[float | None]:
        if len(reference) != len(completions):
            raise ValueError(f"reference has {len(reference)} entries but there are {len(completions)} completions")
        pick = 0 if self.metric == "reward" else 1
        return [causal_reward(completion_text(c), ref)[pick] for c, ref in zip(completions, reference)]

    def _draw(self, count: int, rng: np.random.Generator) -> list[dict]:
        items: list[dict] = []
        while len(items) < count:
            scm = sample_scm(rng, self.n_vars, self.n_vals)
            names = [f"v{i}" for i in range(self.n_vars)]
            rng.shuffle(names)
            text = describe(scm, names) if self.prompt == "released" else describe_compact(scm, names)
            for _ in range(min(self.questions_per_model, count - len(items))):
                items.append(self._question(scm, names, text, self.levels[len(items) % len(self.levels)], rng, len(items)))
        return items

    def _question(self, scm: SCM, names: list[str], text: dict, level: str, rng: np.random.Generator, index: int) -> dict:
        n = scm.n_vars
        sample = _sample(scm, rng)
        k = int(rng.integers(n))
        observed = intervened = None
        if level == "observational":
            o = int(rng.integers(n))
            observed = (o, int(sample[o]))
            question = f"What is the marginal distribution of {names[k]} given it is observed that {names[o]}={observed[1]}?"
        elif level == "interventional":
            i = int(rng.integers(n - 1))
            intervened = (i, int(rng.integers(scm.n_vals[i])))
            question = (f"What is the marginal distribution of {names[k]} given we intervented to set "
                        f"{names[i]} to {intervened[1]}?")
        else:
            i = int(rng.integers(n - 1))
            o = int(rng.choice(sorted(scm.descendants(i) | {i})))
            observed, intervened = (o, int(sample[o])), (i, int(rng.integers(scm.n_vals[i])))
            question = (f"What is the marginal distribution of {names[k]} given we first observed "
                        f"{names[o]} = {observed[1]} and then intervened to set {names[i]} to {intervened[1]}?")
        reference = _round(query_distribution(scm, level, k, observed=observed, intervened=intervened))
        if self.prompt == "released":
            system, user = SYSTEM, USER.format(question="Question: " + question, **text)
        else:
            system, user = SYSTEM_COMPACT, USER_COMPACT.format(question=question, **text)
        prompt = [{"role": "system", "content": system}, {"role": "user", "content": user}] if self.chat else f"{system}\n\n{user}"
        return {"id": index, "prompt": prompt, "answer": str(reference), "reference": reference, "level": level,
                "ancestor_size": ancestor_size(scm, level, k, observed, intervened), "n_vars": n}


def _sample(scm: SCM, rng: np.random.Generator) -> np.ndarray:
    """One forward sample of every variable."""
    x = np.zeros(scm.n_vars, dtype=np.int64)
    for j in range(scm.n_vars):
        row = scm.cpts[j][tuple(x[p] for p in scm.parents[j])]
        x[j] = int(rng.choice(scm.n_vals[j], p=row))
    return x
