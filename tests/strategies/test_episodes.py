"""The `episodes` strategy: token-exact multi-turn rows, limits, and failures that never stop a run."""

import logging
import time

import pytest
import torch

from covey.engine import Generation, SamplingParams, TorchEngine
from covey.envs import Action, StepResult
from covey.envs.maze import MazeEnv
from covey.tasks.maze import MazeTask
from covey.models import load
from covey.models.tiny import build_tiny_tokenizer
from covey.rollouts import Rollouts, RolloutsError
from covey.samplers.base import Draw
from covey.strategies import STRATEGIES, RolloutContext
from covey.models.chat import TemplateDelta, TemplateError, render

MAZE = ["A.#", "#..", "#.G"]


class ScriptedEngine:
    """An Engine whose turns are scripted: `script(prompt_ids, call) -> (token ids, finish_reason)`.
    Records every call's prompts and per-prompt limits."""

    pad_token_id, version = 0, 0

    def __init__(self, script):
        self.script, self.calls = script, []

    def generate(self, prompts, n, sampling):
        assert n == 1
        outs = [self.script(list(p), len(self.calls)) for p in prompts]
        self.calls.append({"prompts": [list(p) for p in prompts], "limits": sampling.prompt_max_new_tokens,
                           "outs": [o[0] for o in outs]})  # fmt: skip
        t = max(len(o[0]) for o in outs)
        ids = torch.zeros(len(outs), t, dtype=torch.long)
        mask = torch.zeros(len(outs), t)
        for i, (toks, _) in enumerate(outs):
            ids[i, : len(toks)] = torch.tensor(toks)
            mask[i, : len(toks)] = 1.0
        ent = (ids % 7).float() * 0.1 * mask  # deterministic per token, for EMPG
        return Generation(prompt_ids=[torch.tensor(p) for p in prompts], completion_ids=ids, completion_mask=mask,
                          logprobs=-0.5 * mask, finish_reason=[o[1] for o in outs], prompt_index=torch.arange(len(outs)),
                          entropies=ent)  # fmt: skip

    def load_weights(self, source, version=None):
        pass

    def close(self):
        pass


def context(items, engine, tok, group=2, max_new_tokens=32):
    return RolloutContext(engine=engine, tokenizer=tok, draws=[Draw(it, group) for it in items],
                          sampling=lambda r: SamplingParams(max_new_tokens=max_new_tokens, seed=7 + r),
                          score=None, draw=None)  # fmt: skip


def strategy(env, **kw):
    return STRATEGIES.build("episodes", {"env": env, **kw})


@pytest.fixture(scope="module")
def smol_tok():
    from transformers import AutoTokenizer

    from covey.models.convert import prepare

    return AutoTokenizer.from_pretrained(prepare("smollm2-135m-instruct"))


def split_row(batch, i):
    """(prompt, completion tokens, per-token turn) of row i, padding cut."""
    turn = batch.turn[i].tolist()
    last = max(k for k, t in enumerate(turn) if t >= 0)
    return batch.prompt_ids[i].tolist(), batch.completion_ids[i, : last + 1].tolist(), turn[: last + 1]


# ---------------------------------------------------------------------------- token exactness
def test_smollm2_episode_stream_is_the_chat_template_of_the_conversation(smol_tok):
    tok = smol_tok
    call = '<tool_call>{"name": "calculator", "arguments": {"expression": "12*3"}}</tool_call>'
    texts = [call, "The answer is 40."]
    sampled = [tok.encode(t) + [tok.eos_token_id] for t in texts]
    engine = ScriptedEngine(lambda p, k: (sampled[k], "stop"))
    item = {"id": 3, "prompt": "What is 12*3+4?", "answer": "40"}
    batch, m = strategy({"name": "calculator"}).rollout([item], context([item], engine, tok, group=1))
    conv = [{"role": "system", "content": __import__("covey.envs.calculator", fromlist=["SYSTEM"]).SYSTEM},
            {"role": "user", "content": item["prompt"]}, {"role": "assistant", "content": texts[0]},
            {"role": "tool", "content": "36"}]  # fmt: skip
    # what the engine saw each turn is exactly the template's rendering of the conversation so far
    assert engine.calls[0]["prompts"][0] == render(tok, conv[:2], generation_prompt=True)
    assert engine.calls[1]["prompts"][0] == render(tok, conv, generation_prompt=True)
    prompt, comp, turn = split_row(batch, 0)
    full = render(tok, [*conv, {"role": "assistant", "content": texts[1]}], generation_prompt=False)
    assert prompt + comp == full[: len(prompt) + len(comp)] and full[len(prompt) + len(comp) :] == tok.encode("\n")
    # training tokens = the sampled tokens (mask 1), everything else is env tokens (mask 0)
    mask = batch.completion_mask[0, : len(comp)].tolist()
    assert [x for x, k in zip(comp, mask) if k] == sampled[0] + sampled[1]
    assert [t for t, k in zip(turn, mask) if k] == [0] * len(sampled[0]) + [1] * len(sampled[1])
    env = [x for x, k in zip(comp, mask) if not k]
    assert env == TemplateDelta(tok).tokens([{"role": "tool", "content": "36"}], closed=True)
    assert batch.rewards.tolist() == [[1.0]] and batch.step_rewards == [[0.0, 1.0]] and batch.step_anchors == [[0, 1]]
    assert batch.finish_reason == ["stop"] and m["episodes/success_rate"] == 1.0 and m["episodes/tool_error_rate"] == 0.0


def test_a_turn_cut_by_its_budget_gets_the_closing_token_as_an_env_token(smol_tok):
    tok = smol_tok
    first, second = tok.encode("I will go"), tok.encode("right") + [tok.eos_token_id]
    engine = ScriptedEngine(lambda p, k: (first, "length") if k == 0 else (second, "stop"))
    item = MazeTask(size=3).examples("train")[0] | {"maze": MAZE}
    item["prompt"] = __import__("covey.envs.maze", fromlist=["first_prompt"]).first_prompt(MAZE)
    batch, _ = strategy({"name": "maze"}, max_turns=2).rollout([item], context([item], engine, tok, group=1))
    prompt, comp, turn = split_row(batch, 0)
    invalid = "Invalid action. Reply with one move: up, down, left or right.\nA.#\n#..\n#.G"
    conv = [*item["prompt"], {"role": "assistant", "content": "I will go"}, {"role": "user", "content": invalid},
            {"role": "assistant", "content": "right"}]  # fmt: skip
    full = render(tok, conv, generation_prompt=False)
    assert prompt + comp == full[: len(prompt) + len(comp)]
    k = len(first)
    assert comp[k] == tok.eos_token_id and batch.completion_mask[0, k] == 0 and turn[k] == -1  # added, not sampled
    assert batch.finish_reason == ["length"] and batch.step_rewards == [[0.0, 0.0]]


def test_tiny_model_rows_hold_exactly_the_sampled_tokens_and_the_env_tokens():
    model, tok = load("tiny-llama")
    engine = TorchEngine(model, tokenizer=tok, dtype="fp32")
    calls = []
    real = engine.generate

    def recording(prompts, n, sp):
        gen = real(prompts, n, sp)
        calls.append([(list(map(int, p)), gen.completion_ids[i, : gen.lengths[i]].tolist(), gen.logprobs[i, : gen.lengths[i]].tolist())
                      for i, p in enumerate(prompts)])  # fmt: skip
        return gen

    engine.generate = recording
    items = MazeTask(size=3, n_train=2).examples("train")
    batch, m = strategy({"name": "maze", "max_steps": 3}, max_turns=3).rollout(items, context(items, engine, tok, group=2, max_new_tokens=6))
    assert len(batch) == 4 and batch.group.tolist() == [0, 0, 1, 1] and m["episodes/count"] == 4
    delta = TemplateDelta(tok)
    for i in range(len(batch)):
        prompt, comp, turn = split_row(batch, i)
        env = MazeEnv(max_steps=3)
        env.reset(batch.items[i], seed=0)
        pos = 0
        for t in range(len(batch.step_rewards[i])):
            # the engine's output for this episode's turn t (the G episodes of an item share turn 0's prompt)
            found = [c for c in calls[t] if c[0] == prompt + comp[:pos] and c[1] == comp[pos : pos + len(c[1])]]
            assert found, f"row {i} turn {t}: no engine output matches"
            calls[t].remove(found[0])
            _, out, lps = found[0]
            assert comp[pos : pos + len(out)] == out and turn[pos : pos + len(out)] == [t] * len(out)
            assert batch.completion_mask[i, pos : pos + len(out)].tolist() == [1.0] * len(out)
            assert batch.behaviour_logprobs[i, pos : pos + len(out)].tolist() == pytest.approx(lps)
            pos += len(out)
            res = env.step(Action(tok.decode(out, skip_special_tokens=True), out, []))
            assert batch.step_rewards[i][t] == res.reward
            if pos < len(comp):  # env tokens follow: exactly the template delta of the env's messages
                want = delta.tokens(res.messages, closed=out[-1] == tok.eos_token_id)
                assert comp[pos : pos + len(want)] == want and set(turn[pos : pos + len(want)]) == {-1}
                assert batch.completion_mask[i, pos : pos + len(want)].sum() == 0
                pos += len(want)
        assert pos == len(comp)


THINK_DROPPING = (
    "{% for m in messages %}{% if m['role'] == 'assistant' and not loop.last %}"
    "{{ '<|im_start|>assistant\n' + m['content'].split('</think>')[-1].lstrip('\n') + '<|im_end|>\n' }}"
    "{% else %}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>\n' }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)  # Qwen3-like: earlier <think> blocks are dropped from the history


def test_a_template_that_rewrites_history_is_detected():
    tok = build_tiny_tokenizer()
    tok.chat_template = THINK_DROPPING
    with pytest.raises(TemplateError, match="rewrites earlier turns"):
        TemplateDelta(tok)
    TemplateDelta(build_tiny_tokenizer())  # the plain ChatML template appends
    engine = ScriptedEngine(lambda p, k: (tok.encode("right") + [tok.eos_token_id], "stop"))
    with pytest.raises(TemplateError, match="layout per_step"):
        strategy({"name": "maze"}, layout="concat").rollout([maze_item(0)], context([maze_item(0)], engine, tok))


def test_per_step_rows_hold_each_turn_with_the_context_the_engine_saw():
    tok = build_tiny_tokenizer()
    tok.chat_template = THINK_DROPPING
    texts = ["<think>\nwall?\n</think>\n\nright", "<think>\nok\n</think>\n\ndown"]
    sampled = [tok.encode(t) + [tok.eos_token_id] for t in texts]
    engine = ScriptedEngine(lambda p, k: (sampled[k], "stop"))
    batch, m = strategy({"name": "maze"}, max_turns=2).rollout([maze_item(0)], context([maze_item(0)], engine, tok, group=1))  # auto
    assert m["episodes/per_step_layout"] == 1.0 and len(batch) == 2
    conv = [*maze_item(0)["prompt"]]
    for t in range(2):
        assert batch.prompt_ids[t].tolist() == engine.calls[t]["prompts"][0] == render(tok, conv, generation_prompt=True)
        k = len(sampled[t])
        assert batch.completion_ids[t, :k].tolist() == sampled[t] and batch.completion_mask[t].sum() == k
        assert batch.turn[t, :k].tolist() == [t] * k and batch.turn[t, k:].eq(-1).all()
        conv += [{"role": "assistant", "content": texts[t]}, {"role": "user", "content": "OK.\n.A#\n#..\n#.G"}]
    assert "wall?" not in tok.decode(batch.prompt_ids[1].tolist())  # the template dropped the earlier think block
    assert batch.episode.tolist() == [0, 0] and batch.step_rewards == [[0.0, 0.0]] * 2 and batch.rewards.tolist() == [[0.0]] * 2


def by_step(batch, adv):
    """{(episode, turn): value} of [N, T] advantages (one value per step's tokens)."""
    out = {}
    for i in range(len(batch)):
        for t in sorted(set(batch.turn[i].tolist()) - {-1}):
            v = adv[i][batch.turn[i] == t]
            assert torch.allclose(v, v[0].expand_as(v))
            out[(int(batch.episode[i]), t)] = round(float(v[0]), 5)
    return out


def test_step_estimators_give_the_same_step_values_in_both_layouts():
    from covey.algos import ADVANTAGES

    moves = {0: ["right", "up", "down"], 1: ["right", "down", "down"], 2: ["up", "up", "up"]}

    def script(p, k):
        who = sum(p) % 3  # a deterministic "policy" that differs between episodes of a group
        return tok.encode(moves[who][min(k, 2)]) + [tok.eos_token_id], "stop"

    tok = build_tiny_tokenizer()
    items = [maze_item(0), maze_item(1)]
    got = {}
    for layout in ("concat", "per_step"):
        engine = ScriptedEngine(script)
        st = strategy({"name": "tests.strategies.test_episodes:VariedEnv"}, layout=layout, max_turns=3)
        batch, m = st.rollout(items, context(items, engine, tok, group=3))
        assert m["episodes/per_step_layout"] == float(layout == "per_step")
        got[layout] = {name: by_step(batch, ADVANTAGES[name].bind({})(batch).advantages) for name in ("gigpo", "hgpo", "salt", "empg")}
        first = {int(e): i for i, e in reversed(list(enumerate(batch.episode.tolist())))}
        turns = sum(len(batch.step_rewards[i]) for i in first.values())
        assert len(first) == 6 and turns > 6 and len(batch) == (6 if layout == "concat" else turns)
    assert got["concat"] == got["per_step"]
    assert any(v != 0 for v in got["concat"]["gigpo"].values())


# ---------------------------------------------------------------------------- limits and failures
def tiny_script(text_of):
    tok = build_tiny_tokenizer()
    return tok, ScriptedEngine(lambda p, k: (tok.encode(text_of(p, k)) + [tok.eos_token_id], "stop"))


def maze_item(i):
    from covey.envs.maze import first_prompt

    return {"id": i, "prompt": first_prompt(MAZE), "maze": MAZE}


def test_max_turns_invalid_streak_and_success_are_counted():
    tok, engine = tiny_script(lambda p, k: "right" if k == 0 else "??")
    batch, m = strategy({"name": "maze"}, max_turns=5, max_invalid=2).rollout([maze_item(0)], context([maze_item(0)], engine, tok))
    assert m["episodes/end/invalid_streak"] == 1.0 and batch.step_rewards == [[0.0] * 3] * 2
    assert m["episodes/invalid_action_rate"] == pytest.approx(4 / 6) and m["episodes/length_mean"] == 3
    tok, engine = tiny_script(lambda p, k: "up")
    _, m = strategy({"name": "maze"}, max_turns=2).rollout([maze_item(0)], context([maze_item(0)], engine, tok))
    assert m["episodes/end/max_turns"] == 1.0 and m["episodes/success_rate"] == 0.0
    moves = ["right", "down", "down", "right"]
    tok, engine = tiny_script(lambda p, k: moves[k])
    batch, m = strategy({"name": "maze"}).rollout([maze_item(0)], context([maze_item(0)], engine, tok))
    assert m["episodes/end/terminated"] == 1.0 and m["episodes/success_rate"] == 1.0 and batch.rewards.tolist() == [[1.0], [1.0]]
    # the G episodes of a group start in the same state, and repeated states share an anchor
    assert batch.step_anchors[0] == batch.step_anchors[1] and batch.step_anchors[0][0] == "A.#\n#..\n#.G"


def test_each_turn_budget_is_clipped_to_the_context_left():
    tok, engine = tiny_script(lambda p, k: "up")
    prompt_len = len(render(tok, maze_item(0)["prompt"], generation_prompt=True))
    st = strategy({"name": "maze"}, max_turns=8, max_context_tokens=prompt_len + 60)
    batch, m = st.rollout([maze_item(0)], context([maze_item(0)], engine, tok, group=1, max_new_tokens=32))
    assert engine.calls[0]["limits"] is None  # 60 left >= 32: the plain budget
    env = len(TemplateDelta(tok).tokens([{"role": "user", "content": "You hit a wall.\nA.#\n#..\n#.G"}], True))
    assert 1 <= 60 - 3 - env < 32 and engine.calls[1]["limits"] == (60 - 3 - env,)  # "up" + eos = 3 tokens
    assert len(engine.calls) == 2 and m["episodes/end/context"] == 1.0  # no room left after the second env answer
    assert len(batch.prompt_ids[0]) + int((batch.turn[0] >= 0).nonzero().max()) + 1 <= prompt_len + 60


class FlakyEnv(MazeEnv):
    """Item 1 misbehaves at its second step: `mode` crash, hang or a bad return value."""

    def __init__(self, *, mode: str = "crash"):
        super().__init__()
        self.mode, self.n = mode, 0

    def reset(self, item, *, seed):
        if self.mode == "reset_crash" and item["id"] == 1:
            raise RuntimeError("cannot start")
        self.item = item
        return super().reset(item, seed=seed)

    def step(self, action):
        self.n += 1
        if self.item["id"] == 1 and self.n == 2:
            if self.mode == "crash":
                raise RuntimeError("boom")
            if self.mode == "hang":
                time.sleep(3)
            if self.mode == "bad":
                return {"messages": []}
        return super().step(action)


@pytest.mark.parametrize(("mode", "reason"), [("crash", "env_error"), ("hang", "env_timeout"), ("bad", "env_error"),
                                              ("reset_crash", "env_error")])  # fmt: skip
def test_a_failing_env_fails_its_episodes_not_the_run(mode, reason):
    tok, engine = tiny_script(lambda p, k: "up")
    st = strategy({"name": "tests.strategies.test_episodes:FlakyEnv", "mode": mode}, max_turns=3, step_timeout_s=0.3)
    t0 = time.perf_counter()
    batch, m = st.rollout([maze_item(0), maze_item(1)], context([maze_item(0), maze_item(1)], engine, tok))
    assert time.perf_counter() - t0 < 2.5  # the hung step was abandoned at the timeout
    assert m[f"episodes/end/{reason}"] == 0.5 and m["episodes/failed"] == 2.0
    assert len(batch) == 2 and batch.prompt_id.tolist() == [0, 0] and batch.step_rewards == [[0.0] * 3] * 2


def test_malformed_tool_calls_go_back_as_errors_and_are_counted():
    tok, engine = tiny_script(lambda p, k: "<tool_call>{not json</tool_call>")
    item = {"id": 0, "prompt": "2+2?", "answer": "4"}
    batch, m = strategy({"name": "calculator", "max_calls": 9}, max_invalid=3).rollout([item], context([item], engine, tok, group=1))
    assert m["episodes/end/invalid_streak"] == 1.0 and m["episodes/tool_malformed"] == 3.0
    assert m["episodes/tool_error_rate"] == 1.0 and m["episodes/invalid_action_rate"] == 1.0
    stream = tok.decode(batch.completion_ids[0].tolist())
    assert stream.count("error: tool call is not valid JSON") == 2  # the env answered the first two turns


def test_all_failed_gives_an_empty_batch_and_bad_params_fail_early():
    tok, engine = tiny_script(lambda p, k: "up")
    st = strategy({"name": "tests.strategies.test_episodes:FlakyEnv", "mode": "reset_crash"})
    batch, m = st.rollout([maze_item(1)], context([maze_item(1)], engine, tok))
    assert len(batch) == 0 and m["episodes/failed"] == 2.0 and engine.calls == []
    with pytest.raises(Exception, match="layout"):
        strategy({"name": "maze"}, layout="rows")
    with pytest.raises(ValueError, match="max_turns"):
        strategy({"name": "maze"}, max_turns=0)


# ---------------------------------------------------------------------------- Rollouts fields
def test_rollouts_episode_fields_select_concat_and_validate():
    tok, engine = tiny_script(lambda p, k: "up" if k == 0 else "?")
    batch, _ = strategy({"name": "maze"}, max_turns=2).rollout([maze_item(0), maze_item(1)], context([maze_item(0), maze_item(1)], engine, tok))
    sub = batch.select([1])
    assert sub.step_rewards == [batch.step_rewards[1]] and torch.equal(sub.turn[0], batch.turn[1])
    short = sub.select([0])
    short.completion_ids, short.completion_mask = short.completion_ids[:, :5], short.completion_mask[:, :5]
    short.behaviour_logprobs, short.policy_version, short.turn = short.behaviour_logprobs[:, :5], short.policy_version[:, :5], short.turn[:, :5]
    short.entropies = short.entropies[:, :5]
    short.step_rewards, short.step_anchors = [short.step_rewards[0][:1]], [short.step_anchors[0][:1]]
    joined = Rollouts.concat([short.validate(), sub])
    assert joined.turn[0, 5:].eq(-1).all() and joined.step_rewards[0] == [0.0]
    bad = batch.select([0])
    bad.turn = torch.full_like(bad.turn, -1)
    with pytest.raises(RolloutsError, match="turn -1"):
        bad.validate()
    bad = batch.select([0])
    bad.step_anchors = [[]]
    with pytest.raises(RolloutsError, match="one entry per turn"):
        bad.validate()


# ---------------------------------------------------------------------------- end to end
class VariedEnv(MazeEnv):
    """The maze, with a reward that varies with the turn's text (the random tiny model never moves),
    so advantages are non-zero and an update changes the weights."""

    def step(self, action):
        res = super().step(action)
        res.reward = float(sum(action.token_ids) % 3)
        return res


def test_covey_train_runs_the_maze_gigpo_example_for_two_steps(tmp_path):
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    example = Path(__file__).parents[2] / "examples" / "agents" / "maze_gigpo.yaml"
    run = tmp_path / "run"
    args = ["steps=2", "rollout.prompts_per_step=2", "rollout.group_size=2", "rollout.strategy.max_turns=3",
            "sampling.max_new_tokens=4", "reward_workers=0", "log.report_to=[jsonl]", "log.progress=false"]  # fmt: skip
    out = subprocess.run([sys.executable, "-m", "covey.cli", "train", str(example), "--run-dir", str(run), *args],
                         env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=600)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    steps = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [s["step"] for s in steps] == [1, 2]
    for s in steps:
        assert s["episodes/count"] == 4 and 1 <= s["episodes/length_mean"] <= 3
        for key in ("episodes/success_rate", "episodes/invalid_action_rate", "episodes/tool_error_rate",
                    "time/env_per_step", "adv/gigpo/step_group_size_mean", "reward/mean"):  # fmt: skip
            assert key in s
    assert (run / "checkpoint-2").is_dir()


def test_trainer_updates_the_policy_from_episodes_with_step_credit(tmp_path):
    from covey.train.config import load_config
    from covey.train.trainer import Trainer

    cfg = load_config(None, ["model.name=tiny-llama", "model.dtype=fp32", "engine.dtype=fp32", "task.name=maze",
                             "task.params={size: 3, n_train: 4, n_test: 1}", "env.name=tests.strategies.test_episodes:VariedEnv",
                             "rollout.strategy.name=episodes", "rollout.strategy.max_turns=2", "rollout.prompts_per_step=2",
                             "rollout.group_size=2", "sampling.max_new_tokens=4", "reward_workers=0", "algo.kl=null",
                             "algo.advantage.name=hgpo", "log.report_to=[jsonl]", "steps=1", "optim.lr=1e-2"])  # fmt: skip
    trainer = Trainer(cfg, tmp_path / "run")
    try:
        before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
        m = trainer.step()
        assert m["adv/std"] > 0 and m["learn/grad_norm"] > 0
        assert any(not torch.equal(before[n], p) for n, p in trainer.model.named_parameters())
    finally:
        trainer.close()


@pytest.mark.slow  # three CLI runs of 3 steps of episodes with the tiny model
def test_episodes_resume_exactly_after_sigkill(tmp_path):
    from tests._kill_resume import kill_and_resume

    cfg = {"model": {"name": "tiny-llama", "dtype": "fp32"}, "engine": {"dtype": "fp32"},
           "task": {"name": "maze", "params": {"size": 3, "n_train": 4, "n_test": 1}},
           "env": {"name": "tests.strategies.test_episodes:VariedEnv"},
           "rollout": {"prompts_per_step": 2, "group_size": 2, "strategy": {"name": "episodes", "max_turns": 2}},
           "sampling": {"max_new_tokens": 4}, "reward_workers": 0, "algo": {"preset": "grpo", "advantage": {"name": "gigpo"}, "kl": None},
           "optim": {"lr": 1e-2}, "steps": 3, "checkpoint": {"every": 1},
           "log": {"report_to": ["jsonl"], "progress": False, "dir": str(tmp_path)}}  # fmt: skip
    a, _, _ = kill_and_resume(tmp_path, cfg, kill_at=2)
    assert [r["step"] for r in a] == [1, 2, 3] and any(r["adv/std"] > 0 for r in a)


# ---------------------------------------------------------------------------- samples.jsonl
@pytest.mark.parametrize("layout", ["concat", "per_step"])
def test_samples_show_whole_episodes_turn_by_turn_with_roles(layout):
    from covey.train.metrics import sample_rows

    moves = ["right", "?", "down"]
    tok, engine = tiny_script(lambda p, k: moves[k])
    item = maze_item(0)
    batch, _ = strategy({"name": "maze"}, max_turns=3, layout=layout).rollout([item], context([item], engine, tok, group=2))
    assert item.get("transcript") is None  # the task's item is not changed
    rows = sample_rows(batch, tok, 5)
    assert len(rows) == 2 and [r["group"] for r in rows] == [0, 0]  # one sample per episode, in both layouts
    ep = rows[0]["episode"]
    assert [m["role"] for m in ep] == ["user", "assistant", "user", "assistant", "user", "assistant", "user"]
    assert ep[0] == item["prompt"][0]
    assert [(m["content"], m["turn"], m["reward"], m["finish_reason"]) for m in ep if m["role"] == "assistant"] == [
        ("right", 0, 0.0, "stop"), ("?", 1, 0.0, "stop"), ("down", 2, 0.0, "stop")]
    assert ep[2] == {"role": "user", "content": "OK.\n.A#\n#..\n#.G", "turn": 0}
    assert ep[4]["turn"] == 1 and ep[6]["content"] == "OK.\n..#\n#A.\n#.G" and rows[0]["episode_end"] == "max_turns"


# ---------------------------------------------------------------------------- held-out eval
def test_evaluate_episodes_plays_one_greedy_episode_per_item():
    from covey.eval.episodes import evaluate_episodes

    tok = build_tiny_tokenizer()
    solve = ["right", "down", "down", "right"]  # solves MAZE; the other maze's agent only goes up
    engine = ScriptedEngine(lambda p, k: (tok.encode(solve[k] if "A.#" in tok.decode(p) else "up") + [tok.eos_token_id], "stop"))
    items = [maze_item(0), {"id": 1, "prompt": "x", "maze": ["A#G", ".#.", "..."]}]
    st = strategy({"name": "maze", "max_steps": 4}, max_turns=6)
    out = evaluate_episodes(engine, tok, st, items, max_new_tokens=8, seed=3)
    assert out == {"accuracy": 0.5, "episodes": 2.0, "failed": 0.0, "return_mean": 0.5, "length_mean": 4.0}
    assert [len(c["prompts"]) for c in engine.calls] == [2, 2, 2, 2]  # one episode per item, 4 turns
    seen = []
    engine = ScriptedEngine(lambda p, k: (tok.encode("up") + [tok.eos_token_id], "stop"))
    generate = engine.generate
    engine.generate = lambda prompts, n, sampling: seen.append(sampling) or generate(prompts, n, sampling)
    crash = strategy({"name": "tests.strategies.test_episodes:FlakyEnv", "mode": "reset_crash"}, max_turns=2)
    out = evaluate_episodes(engine, tok, crash, [maze_item(0), maze_item(1)], max_new_tokens=8)
    assert out["accuracy"] == 0.0 and out["failed"] == 1.0 and out["episodes"] == 2.0  # item 1's reset crashes
    assert seen and all(s.greedy for s in seen)


# ---------------------------------------------------------------------------- faults that used to hang or kill a run
BUILT = {"n": 0}


class FaultyEnv(MazeEnv):
    """`mode`: new_hang (every constructor after the first hangs), always_hang (every constructor), close_hang
    (close() hangs once the env was stepped), huge (the first step answers with a 20 MB observation)."""

    def __init__(self, *, mode: str):
        BUILT["n"] += 1
        if mode == "always_hang" or (mode == "new_hang" and BUILT["n"] > 1):
            time.sleep(3)
        super().__init__()
        self.mode, self.n = mode, 0

    def step(self, action):
        self.n += 1
        if self.mode == "huge":
            return StepResult([{"role": "user", "content": "x" * 20_000_000}], 0.0)
        return super().step(action)

    def close(self):
        if self.mode == "close_hang" and self.n:
            time.sleep(3)


@pytest.mark.parametrize(("mode", "end"), [("new_hang", "env_timeout"), ("close_hang", "max_turns"), ("huge", "context")])
def test_env_faults_cost_at_most_a_timeout(mode, end, caplog):
    BUILT["n"] = 0
    tok, engine = tiny_script(lambda p, k: "up")
    st = strategy({"name": "tests.strategies.test_episodes:FaultyEnv", "mode": mode}, max_turns=2, step_timeout_s=0.3)
    t0 = time.perf_counter()
    with caplog.at_level(logging.WARNING):
        _, m = st.rollout([maze_item(0)], context([maze_item(0)], engine, tok))
    assert time.perf_counter() - t0 < 2.5, mode  # a hung constructor / close is abandoned, the observation refused
    assert m[f"episodes/end/{end}"] == 1.0
    if mode != "huge":
        call = "constructor" if mode == "new_hang" else "close()"
        assert f"environment 'tests.strategies.test_episodes:FaultyEnv' {call} gave no answer within step_timeout_s=0.3" \
            in caplog.text


def test_a_constructor_that_hangs_is_a_one_line_config_error():
    t0 = time.perf_counter()
    with pytest.raises(ValueError, match=r"episodes: environment '.*FaultyEnv' constructor gave no answer within "
                                         r"step_timeout_s=0.3 \(building one to check its parameters\)"):
        strategy({"name": "tests.strategies.test_episodes:FaultyEnv", "mode": "always_hang"}, step_timeout_s=0.3)
    assert time.perf_counter() - t0 < 2.0


@pytest.mark.parametrize("call", ["[" * 1000 + "]" * 1000, '{"name": "calculator", "arguments": {"expression": ' + "9" * 5000 + "}}"])
def test_tool_calls_python_cannot_parse_are_tool_errors_not_a_lost_run(call):
    """JSON nested 1,000 deep (RecursionError) and a 5,000-digit integer (ValueError) in a tool call."""
    tok, engine = tiny_script(lambda p, k: f"<tool_call>{call}</tool_call>")
    item = {"id": 0, "prompt": "2+2?", "answer": "4"}
    st = strategy({"name": "calculator", "max_calls": 9}, max_invalid=2, max_context_tokens=30_000)
    batch, m = st.rollout([item], context([item], engine, tok, group=1, max_new_tokens=10_000))
    assert m["episodes/end/invalid_streak"] == 1.0 and m["episodes/tool_malformed"] == 2.0 and len(batch) == 1
    assert "error: tool call JSON" in tok.decode(batch.completion_ids[0].tolist())
