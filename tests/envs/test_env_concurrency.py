"""The episodes strategy steps live episodes concurrently: an env's async `astep` on one event loop,
a sync `step` in threads; `env_workers` caps the calls at a time. Concurrent and sequential stepping
give the same episodes; a hung or failing `astep` fails its episode only."""

import asyncio
import importlib
import itertools
import random
import threading
import time

import pytest
import torch

from covey.envs.maze import MazeEnv
from covey.strategies.episodes import run_with_timeout
from tests.strategies.test_episodes import ScriptedEngine, context, maze_item, strategy
from covey.models.tiny import build_tiny_tokenizer

MOVES = ["right", "down", "??", "left", "up", "down", "right"]


class CountingMaze(MazeEnv):
    """A maze whose step sleeps a little (longer for item 0) and records how many steps ran at once."""

    active = peak = 0
    lock = threading.Lock()

    def reset(self, item, *, seed):
        self.item = item
        return super().reset(item, seed=seed)

    def _enter(self):
        with CountingMaze.lock:
            CountingMaze.active += 1
            CountingMaze.peak = max(CountingMaze.peak, CountingMaze.active)

    def _leave(self):
        with CountingMaze.lock:
            CountingMaze.active -= 1

    def step(self, action):
        self._enter()
        time.sleep(0.02 if self.item["id"] == 0 else 0.005)
        self._leave()
        return super().step(action)


class AsyncMaze(CountingMaze):
    """The same maze with an `astep` that awaits a random delay (episodes finish out of order);
    item 1's second step hangs (`mode: hang`) or raises (`mode: crash`)."""

    asteps = 0

    def __init__(self, *, mode: str = "ok"):
        super().__init__()
        self.mode, self.n = mode, 0

    async def astep(self, action):
        AsyncMaze.asteps += 1
        self.n += 1
        if self.item["id"] == 1 and self.n == 2 and self.mode == "hang":
            await asyncio.sleep(5)
        if self.item["id"] == 1 and self.n == 2 and self.mode == "crash":
            raise RuntimeError("boom")
        self._enter()
        await asyncio.sleep(random.random() * 0.02)
        self._leave()
        return MazeEnv.step(self, action)

    def step(self, action):
        raise AssertionError("the strategy must use astep")


def envs():
    """This module as the env factory imports it (pytest may have imported it under another name)."""
    return importlib.import_module("tests.envs.test_env_concurrency")


def run(env, **kw):
    """Four items x 3 episodes; the scripted model's moves cycle through MOVES across all episodes,
    so the episodes diverge (and some end early) in a fixed order."""
    tok = build_tiny_tokenizer()
    moves = itertools.count()
    engine = ScriptedEngine(lambda p, k: (tok.encode(MOVES[next(moves) % len(MOVES)]) + [tok.eos_token_id], "stop"))
    items = [maze_item(i) for i in range(4)]
    envs().CountingMaze.peak = 0
    return strategy(env, max_turns=6, **kw).rollout(items, context(items, engine, tok, group=3))


def same(a, b):
    assert torch.equal(a.completion_ids, b.completion_ids) and torch.equal(a.turn, b.turn)
    assert a.step_rewards == b.step_rewards and a.step_anchors == b.step_anchors
    assert torch.equal(a.rewards, b.rewards) and a.finish_reason == b.finish_reason


def test_concurrent_sync_and_async_stepping_give_the_sequential_episodes():
    seq, m_seq = run({"name": "tests.envs.test_env_concurrency:CountingMaze"}, env_workers=1)
    assert envs().CountingMaze.peak == 1
    par, _ = run({"name": "tests.envs.test_env_concurrency:CountingMaze"})
    assert envs().CountingMaze.peak > 1
    envs().AsyncMaze.asteps = 0
    apar, _ = run({"name": "tests.envs.test_env_concurrency:AsyncMaze"})
    assert envs().AsyncMaze.asteps == m_seq["episodes/length_mean"] * 12 and envs().CountingMaze.peak > 1
    aseq, _ = run({"name": "tests.envs.test_env_concurrency:AsyncMaze"}, env_workers=1)
    assert envs().CountingMaze.peak == 1
    for other in (par, apar, aseq):
        same(seq, other)
    assert m_seq["episodes/end/terminated"] > 0 and len({tuple(r) for r in seq.step_rewards}) > 1  # episodes differ


@pytest.mark.parametrize(("mode", "reason"), [("hang", "env_timeout"), ("crash", "env_error")])
def test_a_hung_or_crashing_astep_fails_its_episodes_only(mode, reason):
    t0 = time.perf_counter()
    batch, m = run({"name": "tests.envs.test_env_concurrency:AsyncMaze", "mode": mode}, step_timeout_s=0.5)
    assert time.perf_counter() - t0 < 4  # the hung astep was cancelled at its timeout
    assert m[f"episodes/end/{reason}"] == 0.25 and m["episodes/failed"] == 3.0
    assert sorted(set(batch.prompt_id.tolist())) == [0, 2, 3]


def test_an_astep_that_blocks_the_event_loop_cannot_hang_the_run():
    class Blocking:
        async def astep(self):
            time.sleep(2)  # blocks the loop: asyncio.wait_for cannot fire

    t0 = time.perf_counter()
    out = run_with_timeout([Blocking().astep], 0.2, async_calls=[True])
    assert time.perf_counter() - t0 < 1.9 and out[0][0].kind == "env_timeout"


def test_env_workers_must_be_positive():
    with pytest.raises(ValueError, match="env_workers must be >= 1"):
        strategy({"name": "maze"}, env_workers=0)
