"""prime-intellect `verifiers` environments through covey: the `verifiers` task + rollout strategy,
covey's engine as the environment's client (token-exact), the rubric's reward, failures counted."""

import re
import sys
from types import SimpleNamespace

import pytest
import torch

from covey.engine import Generation, SamplingParams
from covey.envs.base import MissingExtra
from covey.samplers.base import Draw
from covey.strategies import RolloutContext
from covey.strategies.verifiers_rollout import episode_rows

EXAMPLE = "covey.envs.verifiers_example:load_environment"


class ScriptedEngine:
    """An Engine whose turns are scripted: `script(prompt_ids, call) -> (token ids, finish_reason)`."""

    pad_token_id, version = 0, 0

    def __init__(self, script):
        self.script, self.calls = script, []

    def generate(self, prompts, n, sampling):
        assert n == 1
        outs = [self.script(list(p), len(self.calls)) for p in prompts]
        self.calls.append({"prompts": [list(p) for p in prompts], "limits": sampling.prompt_max_new_tokens})
        t = max(len(o[0]) for o in outs)
        ids, mask = torch.zeros(len(outs), t, dtype=torch.long), torch.zeros(len(outs), t)
        for i, (toks, _) in enumerate(outs):
            ids[i, : len(toks)], mask[i, : len(toks)] = torch.tensor(toks, dtype=torch.long), 1.0
        lps = -0.25 * torch.arange(1, t + 1).float() * mask  # distinct per position: checks they are carried over
        return Generation(prompt_ids=[torch.tensor(p) for p in prompts], completion_ids=ids, completion_mask=mask,
                          logprobs=lps, finish_reason=[o[1] for o in outs], prompt_index=torch.arange(len(outs)))  # fmt: skip


def context(items, engine, tok, group=2, max_new_tokens=16):
    return RolloutContext(engine=engine, tokenizer=tok, draws=[Draw(it, group) for it in items],
                          sampling=lambda r: SamplingParams(max_new_tokens=max_new_tokens, seed=7 + r),
                          score=None, draw=None)  # fmt: skip


def split_row(batch, i):
    turn = batch.turn[i].tolist()
    last = max(k for k, t in enumerate(turn) if t >= 0)
    return batch.prompt_ids[i].tolist(), batch.completion_ids[i, : last + 1].tolist(), turn[: last + 1]


# ------------------------------------------------------------------ without the verifiers package
def test_rows_merge_turns_whose_prompt_extends_and_split_where_it_does_not():
    def step(p, c, lp, rid):
        return {"tokens": {"prompt_ids": p, "completion_ids": c, "completion_logprobs": lp}, "response": SimpleNamespace(id=rid)}

    steps = [step([1, 2], [3, 4], [-0.1, -0.2], "a"), step([1, 2, 3, 4, 5, 6], [7], [-0.3], "b"),
             step([9, 1], [8], [-0.4], "c"), step([9, 1, 8], [2], [-0.5], "d")]  # fmt: skip
    assert episode_rows(steps) == [
        ([1, 2], [(0, [3, 4], [-0.1, -0.2], "a"), (-1, [5, 6], None, ""), (1, [7], [-0.3], "b")]),
        ([9, 1], [(2, [8], [-0.4], "c"), (3, [2], [-0.5], "d")]),  # turn 2 rewrote the history: a new row
    ]  # fmt: skip


def test_a_missing_verifiers_package_is_a_one_line_config_error(monkeypatch):
    from covey.envs import verifiers_adapter
    from covey.tasks.verifiers import VerifiersTask
    from covey.train.config import RunConfig

    monkeypatch.setitem(sys.modules, "verifiers", None)  # import verifiers raises ImportError
    monkeypatch.setattr(verifiers_adapter, "_ENVS", {})
    with pytest.raises(MissingExtra, match=r"pip install 'covey\[verifiers\]'"):
        VerifiersTask(env=EXAMPLE)
    with pytest.raises(ValueError, match=r"^1 validation error[\s\S]*verifiers environments need the verifiers package: pip install"):
        RunConfig.model_validate({"task": {"name": "verifiers", "params": {"env": EXAMPLE}},
                                  "rollout": {"strategy": {"name": "verifiers"}}, "algo": {"preset": "grpo", "kl": None}})  # fmt: skip


@pytest.mark.parametrize(("cfg", "message"), [
    ({"task": {"name": "arithmetic"}, "rollout": {"strategy": {"name": "verifiers"}}}, "go together"),
    ({"task": {"name": "verifiers", "params": {"env": EXAMPLE}}}, "go together"),
    ({"task": {"name": "verifiers", "params": {"env": EXAMPLE}}, "rollout": {"strategy": {"name": "verifiers"}},
      "rewards": [{"name": "length"}]}, "reward functions are not applied"),
])  # fmt: skip
def test_config_refuses_half_a_verifiers_setup_and_extra_rewards(cfg, message):
    from covey.train.config import RunConfig

    with pytest.raises(ValueError, match=message):
        RunConfig.model_validate({**cfg, "algo": {"preset": "grpo", "kl": None}})


# ------------------------------------------------------------------ with verifiers (covey[verifiers])
@pytest.fixture(scope="module")
def smol_tok():
    pytest.importorskip("verifiers")
    from transformers import AutoTokenizer

    from covey.models.convert import prepare

    return AutoTokenizer.from_pretrained(prepare("smollm2-135m-instruct"))


def build(**kw):
    from covey.strategies import STRATEGIES

    return STRATEGIES.build("verifiers", kw)


def sum_items(n=2, **args):
    from covey.tasks.verifiers import VerifiersTask

    return VerifiersTask(env=EXAMPLE, args={"max_turns": 3, **args}).examples("train")[:n]


def answer_of(tok, prompt_ids) -> int:
    a, b = re.findall(r"What is (\d+) \+ (\d+)\?", tok.decode(prompt_ids))[0]
    return int(a) + int(b)


def test_episodes_are_token_exact_batched_per_turn_and_scored_by_the_rubric(smol_tok):
    from covey.envs.verifiers_example import RETRY, SYSTEM
    from covey.strategies.episodes import TemplateDelta, render

    tok = smol_tok
    # turn 0 answers wrong (sum + 1), turn 1 right: the env says RETRY once, then the rubric gives 1.0
    engine = ScriptedEngine(lambda p, k: (tok.encode(str(answer_of(tok, p) + (k == 0))) + [tok.eos_token_id], "stop"))
    items = sum_items(2)
    batch, m = build().rollout(items, context(items, engine, tok, group=2))
    assert [len(c["prompts"]) for c in engine.calls] == [4, 4]  # one engine call per turn for all 4 episodes
    assert len(batch) == 4 and batch.group.tolist() == [0, 0, 1, 1] and batch.episode.tolist() == [0, 1, 2, 3]
    for i in range(4):
        item = items[batch.group[i].item()]
        right = int(item["answer"])
        said = [str(right + 1), str(right)]
        sampled = [tok.encode(s) + [tok.eos_token_id] for s in said]
        conv = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": item["question"]},
                {"role": "assistant", "content": said[0]}, {"role": "user", "content": RETRY}]  # fmt: skip
        prompt, comp, turn = split_row(batch, i)
        # the engine's prompts are the chat template of the conversation so far, and the row holds them
        assert prompt == render(tok, conv[:2], generation_prompt=True) == engine.calls[0]["prompts"][i]
        assert prompt + comp[: -len(sampled[1])] == render(tok, conv, generation_prompt=True) == engine.calls[1]["prompts"][i]
        mask = batch.completion_mask[i, : len(comp)].tolist()
        assert [x for x, k in zip(comp, mask) if k] == sampled[0] + sampled[1]  # trained: exactly the sampled ids
        assert [t for t, k in zip(turn, mask) if k] == [0] * len(sampled[0]) + [1] * len(sampled[1])
        assert [x for x, k in zip(comp, mask) if not k] == TemplateDelta(tok).tokens([{"role": "user", "content": RETRY}], closed=True)
        lps = batch.behaviour_logprobs[i, : len(comp)][batch.completion_mask[i, : len(comp)] > 0].tolist()
        assert lps == pytest.approx([-0.25 * (j + 1) for j in range(len(sampled[0]))] + [-0.25 * (j + 1) for j in range(len(sampled[1]))])
        assert batch.items[i]["episode_end"] == "answered"
        assert [(x["role"], x["content"]) for x in batch.items[i]["transcript"]] == [(c["role"], c["content"]) for c in conv] + [("assistant", said[1])]
    assert batch.rewards.tolist() == [[1.0]] * 4 and batch.step_rewards == [[0.0, 1.0]] * 4
    assert batch.finish_reason == ["stop"] * 4 and batch.reward_names == ("env_return",)
    assert m["episodes/count"] == 4 and m["verifiers/failed"] == 0 and m["episodes/length_mean"] == 2
    assert m["episodes/turns_per_engine_call"] == 4 and m["verifiers/rendered_turns"] == 0 and m["reward/mean"] == 1.0


def test_a_cut_turn_gets_the_closing_token_and_a_full_context_ends_the_episode(smol_tok):
    tok = smol_tok
    first = tok.encode("1 2 3")  # cut by the budget: no end-of-turn token
    engine = ScriptedEngine(lambda p, k: (first, "length") if k == 0 else (tok.encode("0") + [tok.eos_token_id], "stop"))
    items = sum_items(1)
    n0 = len(__import__("covey.strategies.episodes", fromlist=["render"]).render(tok, items[0]["prompt"], generation_prompt=True))
    # room for turn 0 and turn 1, not for the prompt of turn 2
    batch, m = build(max_context_tokens=n0 + 24).rollout(items, context(items, engine, tok, group=1))
    prompt, comp, turn = split_row(batch, 0)
    k = len(first)
    assert comp[:k] == first and comp[k] == tok.eos_token_id and batch.completion_mask[0, k] == 0 and turn[k] == -1
    assert engine.calls[1]["prompts"][0] == prompt + comp[: len(engine.calls[1]["prompts"][0]) - len(prompt)]
    assert engine.calls[1]["limits"] == (n0 + 24 - len(engine.calls[1]["prompts"][0]),)  # the budget clipped to the context
    assert len(engine.calls) == 2 and batch.items[0]["episode_end"] == "prompt_too_long"
    assert batch.finish_reason == ["length"] and batch.rewards.tolist() == [[0.0]] and batch.step_rewards == [[0.0, 0.0]]


def test_a_crashing_environment_fails_its_episodes_not_the_run(smol_tok, monkeypatch):
    import verifiers as vf

    from covey.envs import verifiers_adapter

    tok = smol_tok
    items = sum_items(2)
    env = verifiers_adapter.load_env(items[0]["vf_env"])

    class Crashing(type(env)):
        async def env_response(self, messages, state, **kwargs):
            if state["answer"] == items[1]["answer"]:
                raise RuntimeError("boom")
            return [vf.UserMessage(content="again")]

    bad = Crashing(max_turns=2, dataset=env.dataset, rubric=env.rubric)
    spec = items[0]["vf_env"] + "#crashing"
    monkeypatch.setitem(verifiers_adapter._ENVS, spec, bad)
    items = [{**it, "vf_env": spec} for it in items]
    engine = ScriptedEngine(lambda p, k: (tok.encode("x") + [tok.eos_token_id], "stop"))
    batch, m = build().rollout(items, context(items, engine, tok, group=2))
    assert m["verifiers/failed"] == 2 and m["verifiers/error"] == 2 and m["episodes/count"] == 4
    assert batch.group.tolist() == [0, 0] and batch.step_rewards == [[0.0, 0.0]] * 2  # item 0 went on for 2 turns


def test_the_task_reward_is_the_rubric_score_of_one_turn():
    pytest.importorskip("verifiers")
    from covey.tasks.verifiers import VerifiersTask

    task = VerifiersTask(env=EXAMPLE, args={"kind": "single"})
    items = task.examples("test")[:2]
    columns = {k: [it[k] for it in items] for k in items[0] if k not in ("id", "prompt")}
    right = [it["answer"] for it in items]
    got = task.reward([it["prompt"] for it in items], [f"It is {right[0]}", f"{int(right[1]) + 1}"], **columns)
    assert got == [1.0, 0.0]


def test_tiny_model_rows_hold_exactly_what_the_engine_sampled():
    pytest.importorskip("verifiers")
    from covey.engine import TorchEngine
    from covey.models import load
    from covey.strategies.episodes import TemplateDelta

    model, tok = load("tiny-llama")
    engine = TorchEngine(model, tokenizer=tok, dtype="fp32")
    calls, real = [], engine.generate

    def recording(prompts, n, sp):
        gen = real(prompts, n, sp)
        calls.append([(list(map(int, p)), gen.completion_ids[i, : gen.lengths[i]].tolist(), gen.logprobs[i, : gen.lengths[i]].tolist())
                      for i, p in enumerate(prompts)])  # fmt: skip
        return gen

    engine.generate = recording
    items = sum_items(1, max_turns=2)
    batch, m = build().rollout(items, context(items, engine, tok, group=2, max_new_tokens=5))
    assert len(batch) == 2 and m["verifiers/failed"] == 0 and [len(c) for c in calls] == [2, 2]
    delta = TemplateDelta(tok)
    for i in range(2):
        prompt, comp, turn = split_row(batch, i)
        pos = 0
        for t in range(2):  # the random model never answers right: 2 turns, the RETRY message between them
            found = [c for c in calls[t] if c[0] == prompt + comp[:pos] and c[1] == comp[pos : pos + len(c[1])]]
            assert found, f"row {i} turn {t}: no engine output matches"
            calls[t].remove(found[0])
            _, out, lps = found[0]
            assert turn[pos : pos + len(out)] == [t] * len(out) and batch.completion_mask[i, pos : pos + len(out)].tolist() == [1.0] * len(out)
            assert batch.behaviour_logprobs[i, pos : pos + len(out)].tolist() == pytest.approx(lps)
            pos += len(out)
            if t == 0:
                want = delta.tokens([{"role": "user", "content": "Not quite, try again."}], closed=out[-1] == tok.eos_token_id)
                assert comp[pos : pos + len(want)] == want and batch.completion_mask[i, pos : pos + len(want)].sum() == 0
                pos += len(want)
        assert pos == len(comp)


@pytest.mark.slow  # two training steps through the CLI (a subprocess that loads the tiny model)
def test_covey_train_runs_the_verifiers_example_for_two_steps(tmp_path):
    pytest.importorskip("verifiers")
    import json
    import os
    import subprocess
    from pathlib import Path

    example = Path(__file__).parents[2] / "examples" / "agents" / "verifiers_sum.yaml"
    run = tmp_path / "run"
    args = ["steps=2", "rollout.prompts_per_step=1", "rollout.group_size=2", "sampling.max_new_tokens=4",
            "reward_workers=0", "log.report_to=[jsonl]", "log.progress=false"]  # fmt: skip
    out = subprocess.run([sys.executable, "-m", "covey.cli", "train", str(example), "--run-dir", str(run), *args],
                         env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=600)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    steps = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [s["step"] for s in steps] == [1, 2]
    for s in steps:
        assert s["episodes/count"] == 2 and s["verifiers/failed"] == 0 and 1 <= s["episodes/length_mean"] <= 3
        assert s["episodes/turns_per_engine_call"] == 2 and "reward/mean" in s
    assert (run / "checkpoint-2").is_dir()
