"""The `selfplay` strategy: one conversation (row) per role, one group per role, rewards credited across
roles, frozen roles played by the frozen snapshot and never trained, threads and their alignment, and
the config errors of games (covey.envs.roles)."""

import copy
import logging

import pytest
import torch

from covey.algos.registry import ADVANTAGES
from covey.envs import StepResult
from covey.models.chat import TemplateDelta, render
from covey.models.tiny import build_tiny_tokenizer
from covey.strategies import STRATEGIES
from covey.train.config import load_config
from tests.strategies.test_episodes import ScriptedEngine, context

ITEM = {"id": 0, "prompt": "play"}


class Duel:
    """A two-role test game: roles a and b move in turn; after `rounds` moves each, whoever wrote more
    x's wins (+1, the other -1, plus `b_bonus` to b); the winner's reward is credited to the loser's
    last turn through info["rewards"] when the loser moved last."""

    roles = ("a", "b")
    tools = None

    def __init__(self, *, rounds: int = 2, b_bonus: float = 0.0):
        self.rounds, self.b_bonus, self.moves = rounds, b_bonus, []

    def reset(self, item, *, seed):
        self.moves = []
        return StepResult([{"role": "user", "content": "you are a"}], anchor=0, info={"agent": 0})

    def step(self, action):
        mover = len(self.moves) % 2
        self.moves.append(action.text)
        if len(self.moves) == 2 * self.rounds:
            xa = sum(m.count("x") for m in self.moves[0::2])
            xb = sum(m.count("x") for m in self.moves[1::2])
            score = {"a": (xa > xb) - (xa < xb), "b": (xb > xa) - (xb < xa) + self.b_bonus}
            other = "a" if mover else "b"
            return StepResult([], float(score["b" if mover else "a"]), terminated=True, anchor=len(self.moves),
                              info={"agent": mover, "rewards": {other: float(score[other])}})  # fmt: skip
        return StepResult([{"role": "user", "content": f"{'ab'[mover]} said {action.text}"}], anchor=len(self.moves),
                          info={"agent": 1 - mover})  # fmt: skip

    def fork(self):
        return copy.deepcopy(self)

    def close(self):
        pass


def selfplay(env=None, **kw):
    return STRATEGIES.build("selfplay", {"env": env or {"name": "tests.strategies.test_selfplay:Duel"}, "layout": "concat", **kw})


def scripted(tok, outs):
    it = iter(outs)
    return ScriptedEngine(lambda p, k: (tok.encode(next(it)) + [tok.eos_token_id], "stop"))


# rounds of two games: g0 a, g1 a | g0 b, g1 b | g0 a, g1 a | g0 b, g1 b: in g0 a wins, in g1 b wins
MOVES = ["x", "y", "y", "x", "x", "y", "y", "x"]


def test_each_role_is_its_own_conversation_row_and_group():
    tok = build_tiny_tokenizer()
    engine = scripted(tok, MOVES)
    batch, m = selfplay().rollout([ITEM], context([ITEM], engine, tok, group=2))
    assert [it["role"] for it in batch.items] == ["a", "b", "a", "b"] and [it["game"] for it in batch.items] == [0, 0, 1, 1]
    assert batch.group.tolist() == [0, 1, 0, 1]  # (item, a) and (item, b): a role is only ever normalised with itself
    assert batch.step_agents == [[0, 0], [1, 1], [0, 0], [1, 1]]
    # the winner's reward on its last turn, the loser's (credited by info["rewards"]) on its own last turn
    assert batch.step_rewards == [[0.0, 1.0], [0.0, -1.0], [0.0, -1.0], [0.0, 1.0]]
    assert batch.rewards.flatten().tolist() == [1.0, -1.0, -1.0, 1.0]
    assert m["selfplay/games"] == 2 and m["selfplay/a/return_mean"] == 0.0 and m["selfplay/turns_mean"] == 4
    # token exactness: a's second prompt in game 0 = its first prompt + its sampled ids + the template delta of
    # the message it got ("b said y"), and its row holds exactly its own sampled ids as trained tokens
    first = render(tok, [{"role": "user", "content": "you are a"}], generation_prompt=True)
    x = tok.encode("x") + [tok.eos_token_id]
    env_ids = TemplateDelta(tok).tokens([{"role": "user", "content": "b said y"}], closed=True)
    assert engine.calls[2]["prompts"][0] == first + x + env_ids
    row = batch.completion_ids[0][: 2 * len(x) + len(env_ids)].tolist()
    assert row == x + env_ids + x and batch.completion_ids[0][batch.completion_mask[0] > 0].tolist() == x + x


@pytest.mark.parametrize("name", ["grpo", "mars"])
def test_a_roles_advantages_never_depend_on_another_roles_rewards(name):
    tok = build_tiny_tokenizer()
    got = {}
    for bonus in (0.0, 5.0):
        env = {"name": "tests.strategies.test_selfplay:Duel", "b_bonus": bonus}
        batch, _ = selfplay(env).rollout([ITEM], context([ITEM], scripted(tok, MOVES), tok, group=2))
        adv = ADVANTAGES[name].bind({})(batch).advantages
        adv = adv if adv.dim() == 2 else adv[:, None].expand_as(batch.completion_mask)
        got[bonus] = [adv[i][batch.completion_mask[i] > 0] for i in range(len(batch))]
        if name == "grpo":  # a: returns [1, -1] in its group: +-1/sqrt(2)
            assert [round(float(v[0]), 4) for v in got[bonus][0::2]] == [0.7071, -0.7071]
    for i in (0, 2):  # role a's rows: the same whatever b's rewards
        assert torch.equal(got[0.0][i], got[5.0][i])


def test_frozen_roles_are_played_by_the_snapshot_and_never_trained(caplog):
    tok = build_tiny_tokenizer()
    policy, frozen = scripted(tok, ["x", "y", "x", "y"]), scripted(tok, ["y", "x", "y", "x"])
    st = selfplay(frozen_roles=["b"])
    ctx = context([ITEM], policy, tok, group=2)
    ctx.reference_engine = frozen
    batch, m = st.rollout([ITEM], ctx)
    assert [it["role"] for it in batch.items] == ["a", "a"] and batch.step_agents == [[0, 0], [0, 0]]
    assert len(policy.calls) == 2 and len(frozen.calls) == 2  # a's rounds on the policy, b's on the snapshot
    first_a = render(tok, [{"role": "user", "content": "you are a"}], generation_prompt=True)
    assert all(p[: len(first_a)] == first_a for c in policy.calls for p in c["prompts"])
    assert not any(p[: len(first_a)] == first_a for c in frozen.calls for p in c["prompts"])
    assert m["selfplay/frozen_turns"] == 4 and m["selfplay/b/rows"] == 0 and m["selfplay/b/return_mean"] == 0.0
    assert batch.rewards.flatten().tolist() == [1.0, -1.0]  # the frozen b's moves still decide a's rewards
    with caplog.at_level(logging.WARNING):  # the held-out eval has no snapshot: the policy plays b, once said
        batch, _ = st.rollout([ITEM], context([ITEM], scripted(tok, MOVES[:4]), tok, group=1))
    assert len(batch) == 1 and "no frozen snapshot engine" in caplog.text


def test_the_strategy_asks_for_the_snapshot_engine_only_with_frozen_roles():
    from covey.strategies.base import wants_reference_engine

    env = {"name": "tests.strategies.test_selfplay:Duel"}
    assert wants_reference_engine("selfplay", {"env": env, "frozen_roles": ["b"]})
    assert not wants_reference_engine("selfplay", {"env": env}) and not wants_reference_engine("episodes", {"env": env})
    assert wants_reference_engine("reference_pairs", {})


class Boss(Duel):
    """A main role that opens `k` helper threads per game in turn (role 1; group "game" unless scope
    item), each moving once; the last helper's move ends the game. Helper i earns i (its own reward when
    the next one opens; the last one's at the end), the main role the x's of all moves (credited)."""

    roles = ("main", "helper")

    def __init__(self, *, k: int = 3, scope: str = "game"):
        self.k, self.scope, self.n = k, scope, 0

    def reset(self, item, *, seed):
        self.n, self.moves = 0, []
        return StepResult([{"role": "user", "content": "lead"}], info={"agent": 0})

    def step(self, action):
        self.moves.append(action.text)
        if self.n < self.k:
            self.n += 1
            info = {"agent": 1, "thread": f"h{self.n - 1}", **({"group": "game"} if self.scope == "game" else {})}
            reward = float(self.n - 2) if self.n > 1 else 0.0  # helper n-2 earns its index when the next opens
            return StepResult([{"role": "user", "content": f"help {self.n}"}], reward, info=info)
        return StepResult([], float(self.k - 1), terminated=True,
                          info={"agent": 1, "rewards": {"main": float(sum(m.count("x") for m in self.moves))}})  # fmt: skip


def test_threads_open_per_id_form_groups_per_game_and_align_to_slots():
    tok = build_tiny_tokenizer()
    env = {"name": "tests.strategies.test_selfplay:Boss", "k": 3}
    # each game: main, h0, h1, h2 (the last helper's move ends it)
    batch, m = selfplay(env, max_turns=6).rollout([ITEM], context([ITEM], scripted(tok, ["x"] * 20), tok, group=2))
    roles = [it["role"] for it in batch.items]
    assert roles == ["main", "helper", "helper", "helper"] * 2
    # helpers of one game form one group; the main roles of the item's two games another
    assert batch.group.tolist() == [0, 1, 1, 1, 0, 2, 2, 2]
    assert [batch.rewards[i].item() for i in range(4)] == [4.0, 0.0, 1.0, 2.0]  # helper i earns i, main the 4 x's
    assert m["selfplay/helper/rows"] == 6
    aligned, m = selfplay(env, max_turns=6, thread_slots={"helper": 2}).rollout([ITEM], context([ITEM], scripted(tok, ["x"] * 20), tok, group=2))
    assert [it["role"] for it in aligned.items] == ["main", "helper", "helper"] * 2 and m["selfplay/helper/dropped"] == 2
    env1 = {"name": "tests.strategies.test_selfplay:Boss", "k": 1, "scope": "item"}
    padded, m = selfplay(env1, max_turns=6, thread_slots={"helper": 3}).rollout([ITEM], context([ITEM], scripted(tok, ["x"] * 20), tok, group=2))
    assert [it["role"] for it in padded.items] == ["main", "helper", "helper", "helper"] * 2 and m["selfplay/helper/padded"] == 4
    assert padded.group.tolist() == [0, 1, 1, 1, 0, 1, 1, 1]  # scope item: the helpers of both games together
    assert len(set(padded.episode.tolist())) == 8  # a repeated conversation is a row of its own


class BadGame(Duel):
    def __init__(self, *, fault: str = "agent"):
        self.fault = fault

    def step(self, action):
        info = {"agent": 5} if self.fault == "agent" else {"agent": 1, "rewards": {"nobody": 1.0}}
        return StepResult([{"role": "user", "content": "?"}], info=info)


@pytest.mark.parametrize("fault, text", [("agent", "is not a role index"), ("rewards", "never opened and is no role")])
def test_a_game_env_that_breaks_the_protocol_fails_its_game_only(fault, text, caplog):
    tok = build_tiny_tokenizer()
    st = selfplay({"name": "tests.strategies.test_selfplay:BadGame", "fault": fault})
    with caplog.at_level(logging.WARNING):
        batch, m = st.rollout([ITEM], context([ITEM], scripted(tok, ["x"] * 4), tok, group=2))
    assert len(batch) == 0 and m["selfplay/failed_games"] == 2 and text in caplog.text


def test_role_names_must_be_the_envs_and_something_must_train():
    env = {"name": "tests.strategies.test_selfplay:Duel"}
    with pytest.raises(ValueError, match=r"selfplay frozen_roles: 'c' is not a role of environment .*Duel' \(its roles: a, b\)"):
        selfplay(env, frozen_roles=["c"])
    with pytest.raises(ValueError, match="every role .* is frozen, so nothing would train"):
        selfplay(env, frozen_roles=["a", "b"])
    with pytest.raises(ValueError, match="selfplay role_prompts: 'judge' is not a role"):
        selfplay(env, role_prompts={"judge": "be fair"})
    with pytest.raises(ValueError, match="thread_slots: a must be an integer >= 1"):
        selfplay(env, thread_slots={"a": 0})


def test_a_role_prompt_goes_in_front_of_each_of_the_roles_conversations():
    tok = build_tiny_tokenizer()
    engine = scripted(tok, MOVES[:4])
    selfplay(role_prompts={"b": "You play b."}).rollout([ITEM], context([ITEM], engine, tok, group=1))
    b_first = render(tok, [{"role": "system", "content": "You play b."}, {"role": "user", "content": "a said x"}],
                     generation_prompt=True)  # fmt: skip
    assert engine.calls[1]["prompts"][0] == b_first


BASE = ["task.name=arithmetic", "rollout.strategy.name=selfplay", "rollout.group_size=2"]


def test_config_errors_of_games_are_one_line():
    with pytest.raises(ValueError, match=r"selfplay frozen_roles: 'player_9' is not a role of environment 'textarena_selfplay'"):
        load_config(None, [*BASE, "env.name=textarena_selfplay", "env.game=TicTacToe-v0",
                           "rollout.strategy.frozen_roles=[player_9]"])  # fmt: skip
    # a self-play estimator needs a game of two roles or more: a one-role env is refused
    with pytest.raises(ValueError, match=r"algo.advantage 'mars' needs roles \(a game of two roles or more"):
        load_config(None, [*BASE, "env.name=maze", "task.name=maze", "algo.advantage.name=mars"])
    with pytest.raises(ValueError, match=r"algo.advantage 'mars' needs roles"):
        load_config(None, ["task.name=maze", "env.name=maze", "rollout.strategy.name=episodes", "algo.advantage.name=mars"])
    cfg = load_config(None, [*BASE, "env.name=textarena_selfplay", "env.game=TicTacToe-v0", "algo.advantage.name=mars"])
    assert cfg.strategy_spec().params["env"]["game"] == "TicTacToe-v0"


def test_textarena_selfplay_plays_both_players_and_credits_the_loser():
    from covey.envs import ENVS, Action

    env = ENVS.build("textarena_selfplay", {"game": "TicTacToe-v0"})
    assert env.roles == ("player_0", "player_1")
    first = env.reset({}, seed=0)
    assert first.info == {"agent": 0} and "Player 0" in first.messages[0]["content"]
    for i, mv in enumerate(["[0]", "[3]", "[1]", "[4]"]):
        r = env.step(Action(mv, []))
        assert r.info["agent"] == (i + 1) % 2 and not r.done and r.info["valid"]
    r = env.step(Action("[2]", []))  # player 0 completes the top row
    assert r.terminated and r.reward == 1.0 and r.info["rewards"] == {"player_1": -1.0} and r.info["success"]
    env.reset({}, seed=0)
    r = env.step(Action("no move", []))
    assert r.info["agent"] == 0 and r.info["valid"] is False  # TextArena lets the player try again
    with pytest.raises(ValueError, match="num_players >= 2"):
        ENVS.build("textarena_selfplay", {"game": "TicTacToe-v0", "num_players": 1})


class Forfeit(Duel):
    """a loses at once (TextArena ends a game after a player's invalid moves): b never acted."""

    def step(self, action):
        return StepResult([], -1.0, terminated=True, info={"agent": 0, "rewards": {"b": 1.0}})


def test_a_credit_to_a_role_that_never_acted_is_dropped():
    tok = build_tiny_tokenizer()
    batch, m = selfplay({"name": "tests.strategies.test_selfplay:Forfeit"}).rollout([ITEM], context([ITEM], scripted(tok, ["?"]), tok, group=1))
    assert [it["role"] for it in batch.items] == ["a"] and batch.rewards.tolist() == [[-1.0]] and m["selfplay/failed_games"] == 0


def test_per_step_rows_hold_each_turn_of_each_roles_conversation():
    tok = build_tiny_tokenizer()
    st = STRATEGIES.build("selfplay", {"env": {"name": "tests.strategies.test_selfplay:Duel"}, "layout": "per_step"})
    batch, _ = st.rollout([ITEM], context([ITEM], scripted(tok, MOVES), tok, group=2))
    assert len(batch) == 8 and batch.episode.tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
    assert [it["role"] for it in batch.items] == ["a", "a", "b", "b"] * 2 and batch.group.tolist() == [0, 0, 1, 1] * 2
    # b's second prompt: its conversation rendered (its first message, its move, then a's answer)
    b2 = render(tok, [{"role": "user", "content": "a said x"}, {"role": "assistant", "content": "y"},
                      {"role": "user", "content": "a said x"}], generation_prompt=True)  # fmt: skip
    assert batch.prompt_ids[3].tolist() == b2
    adv = ADVANTAGES["mars"].bind({})(batch).advantages
    concat, _ = selfplay().rollout([ITEM], context([ITEM], scripted(tok, MOVES), tok, group=2))
    ref = ADVANTAGES["mars"].bind({})(concat).advantages
    per_turn = [round(float(adv[i][batch.completion_mask[i] > 0][0]), 5) for i in range(8)]  # one turn per row
    whole = [round(float(ref[i][concat.turn[i] == t][0]), 5) for i in range(4) for t in (0, 1)]
    assert per_turn == whole and len(set(whole)) > 1  # the same step values in both layouts


class Sprint(Duel):
    """Duel where a scores the characters of its moves (b the negative): random text gives a signal."""

    def step(self, action):
        res = super().step(action)
        if res.terminated:
            a = float(sum(len(m) for m in self.moves[0::2]))
            return StepResult([], -a, terminated=True, anchor=res.anchor, info={"agent": 1, "rewards": {"a": a}})
        return res


def test_in_a_training_step_the_frozen_roles_snapshot_keeps_the_starting_weights(tmp_path):
    from covey.train.trainer import Trainer
    from tests._configs import tiny_config

    cfg = tiny_config(tmp_path, "env.name=tests.strategies.test_selfplay:Sprint", "rollout.strategy.name=selfplay",
                      "rollout.strategy.frozen_roles=[b]", "rollout.prompts_per_step=1", "steps=1")  # fmt: skip
    trainer = Trainer(cfg, tmp_path / "run")
    try:
        start = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
        m = trainer.step()
        snapshot = dict(trainer.reference_engine.model.named_parameters())
        moved = [n for n, p in trainer.model.named_parameters() if not torch.equal(p, start[n])]
    finally:
        trainer.close()
    assert m["selfplay/frozen_turns"] == 8 and m["selfplay/b/rows"] == 0 and m["selfplay/a/rows"] == 4
    assert moved  # the policy trained on a's rows ...
    assert all(torch.equal(snapshot[n], start[n]) for n in start)  # ... and b's snapshot did not move
