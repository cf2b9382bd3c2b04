"""The `tool_tree` strategy (PORTool's tree rollouts): n trajectories per item that share their first steps
through env.fork(), one tree node per turn, branch 1 = plain episodes, and no tree without fork()."""

import pytest
import torch

from covey.algos.registry import ADVANTAGES
from covey.envs import StepResult
from covey.models.tiny import build_tiny_tokenizer
from covey.strategies import STRATEGIES
from covey.train.config import load_config
from tests.strategies.test_episodes import ScriptedEngine, context

pytest.importorskip("bm25s")

ITEM = {"id": 0, "prompt": "What is the capital of Mogathvi?", "answer": "Dunta", "corpus": "generated:6:0"}
SEARCH = '<tool_call>{"name": "search", "arguments": {"query": "Mogathvi"}}</tool_call>'
BAD = '<tool_call>{"name": "lookup", "arguments": {}}</tool_call>'


def engine(tok, outs):
    """Each call's prompts get the next outputs of `outs` in order."""
    it = iter(outs)
    return ScriptedEngine(lambda p, k: (tok.encode(next(it)) + [tok.eos_token_id], "stop"))


def by_round(tok, rounds):
    """Call k's prompts get rounds[k]'s outputs in turn (cycled)."""
    seen = {"call": -1, "i": 0}

    def script(p, k):
        if k != seen["call"]:
            seen.update(call=k, i=0)
        out = rounds[k][seen["i"] % len(rounds[k])]
        seen["i"] += 1
        return tok.encode(out) + [tok.eos_token_id], "stop"

    return ScriptedEngine(script)


def tree(**kw):
    return STRATEGIES.build("tool_tree", {"env": {"name": "search_qa"}, "layout": "concat", "max_context_tokens": 4096, **kw})


def run(outs, group=3, **kw):
    tok = build_tiny_tokenizer()
    eng = by_round(tok, outs) if isinstance(outs[0], list) else engine(tok, outs)
    return tree(**kw).rollout([ITEM], context([ITEM], eng, tok, group=group, max_new_tokens=200))


# round 0: three searches; round 1: six candidates (2 per trajectory), answers and searches; round 2: answers
OUTS = [[SEARCH], ["Dunta", SEARCH, "Breta", BAD, "Dunta", SEARCH], ["Dunta", "Breta"]]


def test_n_trajectories_share_their_first_steps_as_a_tree():
    batch, m = run(OUTS, branch=2, max_turns=3)
    assert len(batch) == 3 and set(batch.group.tolist()) == {0}  # exactly n trajectories come back
    paths = batch.tree_path
    assert all(len(p) == len(r) for p, r in zip(paths, batch.step_rewards))  # one node per turn
    for i in range(3):
        for j in range(3):  # a shared node is the same turn: the same tokens in both rows up to it
            shared = next((t for t in range(min(len(paths[i]), len(paths[j]))) if paths[i][t] != paths[j][t]), None)
            k = shared if shared is not None else min(len(paths[i]), len(paths[j]))
            if k:
                ti, tj = batch.turn[i], batch.turn[j]
                upto = lambda row, turn: batch.completion_ids[row][(turn >= 0) & (turn < k)].tolist()  # noqa: E731
                assert upto(i, ti) == upto(j, tj)
    assert m["tool_tree/candidates"] >= 3 + 6 and m["tool_tree/kept"] < sum(len(p) for p in paths)  # some steps shared
    assert m["tool_tree/nodes_shared_frac"] > 0
    tools = [[a.get("tool_errors") for a in it["transcript"] if a["role"] == "assistant"] for it in batch.items]
    assert all(t[0] == 0 for t in tools)  # the first steps searched without error
    again, _ = run(OUTS, branch=2, max_turns=3)
    assert again.tree_path == paths and torch.equal(again.completion_ids, batch.completion_ids)  # seeded
    adv = ADVANTAGES["portool_provisional"].bind({})(batch)
    assert adv.advantages.shape == batch.completion_mask.shape and "adv/portool_provisional/forks_branching_frac" in adv.metrics


def test_branch_one_is_plain_episodes():
    outs = [SEARCH, SEARCH, "Dunta", "Breta"]
    tok = build_tiny_tokenizer()
    ep = STRATEGIES.build("episodes", {"env": {"name": "search_qa"}, "layout": "concat", "max_context_tokens": 4096})
    want, _ = ep.rollout([ITEM], context([ITEM], engine(tok, outs), tok, group=2, max_new_tokens=200))
    got, m = run(outs, group=2, branch=1)
    assert torch.equal(got.completion_ids, want.completion_ids) and got.step_rewards == want.step_rewards
    assert got.rewards.tolist() == want.rewards.tolist() == [[1.0], [0.0]]
    assert m["tool_tree/nodes_shared_frac"] == 0 and [len(p) for p in got.tree_path] == [2, 2]


class NoFork:
    tools = None

    def reset(self, item, *, seed):
        return StepResult([{"role": "user", "content": "hi"}])

    def step(self, action):
        return StepResult([], 1.0, terminated=True)

    def close(self):
        pass


def test_a_tree_over_an_environment_without_fork_is_a_one_line_config_error():
    with pytest.raises(ValueError, match=r"tool_tree branches trajectories with env.fork\(\): environment "
                                         r"'tests.strategies.test_tool_tree:NoFork' has no fork\(\)"):
        load_config(None, ["task.name=arithmetic", "rollout.strategy.name=tool_tree",
                           "env.name=tests.strategies.test_tool_tree:NoFork"])  # fmt: skip
    with pytest.raises(ValueError, match="branch must be an integer >= 1"):
        tree(branch=0)
    cfg = load_config(None, ["task.name=search_qa", "rollout.strategy.name=tool_tree", "env.name=search_qa",
                             "algo.advantage.name=portool_provisional"])  # fmt: skip
    assert cfg.algo.advantage.name == "portool_provisional"
    with pytest.raises(ValueError, match=r"algo.advantage 'portool_provisional' needs tree_path"):
        load_config(None, ["task.name=search_qa", "rollout.strategy.name=episodes", "env.name=search_qa",
                           "algo.advantage.name=portool_provisional"])  # fmt: skip
