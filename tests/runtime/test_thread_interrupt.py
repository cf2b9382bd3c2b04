"""`runtime.interrupt_on_update` under `executor: thread`: a weight update interrupts the generate call
in flight and the cut rows continue as prompt + partial output under the new weights. Deterministic:
a scripted engine publishes from inside its own generate call (no thread), and the tiny-llama run
holds one generate call until the learner's publish interrupts it (`HoldingEngine`), no sleeps."""

import pytest
import torch

from covey.engine.base import Generation
from covey.runtime.thread import ThreadExecutor
from covey.train.config import ConfigError, load_config
from covey.train.trainer import Trainer


class ScriptedEngine:
    """An interruptible engine without a model. Call c samples `plan[c][0]` tokens per row (fewer when
    the row's budget is smaller), token ids 10 * (c + 1) + t, log-prob -token / 100, at the version
    it holds; when `plan[c][1]` is a version the learner publishes it during the call (which
    interrupts it: the rows come back "abort")."""

    pad_token_id = 0

    def __init__(self, plan):
        self.plan, self.calls, self.loaded, self.version = plan, [], [], 0
        self.executor: ThreadExecutor | None = None
        self.cut = False

    def interrupt(self) -> bool:
        self.cut = True
        return True

    def load_weights(self, weights, version=None):
        self.loaded.append((weights["w"], version))
        self.version = version

    def generate(self, prompts, n, sp):
        c = len(self.calls)
        k, publish = self.plan[c]
        self.calls.append(([list(p) for p in prompts], n, sp))
        self.cut = False
        if publish is not None:
            self.executor.publish({"w": publish}, publish)
        limits = sp.prompt_max_new_tokens or (sp.max_new_tokens,) * len(prompts)
        rows = [min(k, limits[i]) for i in range(len(prompts)) for _ in range(n)]
        t = max(rows)
        mask = (torch.arange(t)[None] < torch.tensor(rows)[:, None]).float()
        ids = (10 * (c + 1) + torch.arange(t)).repeat(len(rows), 1) * mask.long()
        return Generation(
            prompt_ids=[torch.tensor(p) for p in prompts for _ in range(n)], completion_ids=ids, completion_mask=mask,
            logprobs=-ids.float() / 100, prompt_index=torch.arange(len(prompts)).repeat_interleave(n),
            finish_reason=["abort" if self.cut else "length" if r == limits[0] else "stop" for r in rows],
            policy_version=mask.long() * self.version,
        )  # fmt: skip


def _executor(engine, interrupt=True):
    ex = ThreadExecutor(lambda k, v: (None, {}), engine.load_weights, max_staleness=2, timeout_s=30,
                        interrupt_on_update=interrupt)  # fmt: skip
    engine.executor = ex
    return ex, ex.rollout_engine(engine)


def test_two_updates_in_one_call_continue_the_rows_under_each_new_version():
    from covey.engine.base import SamplingParams

    engine = ScriptedEngine([(3, 1), (1, 2), (2, None)])  # cut after 3 tokens (v1 comes), after 1 more (v2), then 2
    ex, view = _executor(engine)
    gen = view.generate([[5, 6], [7]], 1, SamplingParams(max_new_tokens=8, seed=11))
    assert engine.loaded == [(1, 1), (2, 2)] and engine.version == 2
    (p0, _, s0), (p1, n1, s1), (p2, _, s2) = engine.calls
    assert p1 == [[5, 6, 10, 11, 12], [7, 10, 11, 12]] and n1 == 1  # prompt + partial ids, no re-tokenisation
    assert p2 == [[5, 6, 10, 11, 12, 20], [7, 10, 11, 12, 20]]
    assert s1.prompt_max_new_tokens == (5, 5) and s2.prompt_max_new_tokens == (4, 4)  # budget: 8 - carried
    assert len({s0.seed, s1.seed, s2.seed}) == 3  # a fresh seed per continuation
    assert gen.completion_ids.tolist() == [[10, 11, 12, 20, 30, 31]] * 2
    assert gen.policy_version.tolist() == [[0, 0, 0, 1, 2, 2]] * 2  # each token: the version that sampled it
    assert torch.equal(gen.logprobs, -gen.completion_ids.float() / 100) and gen.finish_reason == ["stop", "stop"]
    assert gen.completion_mask.sum().item() == 12
    assert ex._counts == {"requested": 2, "interrupts": 2, "interrupted_rows": 4, "carried_tokens": 3 * 2 + 4 * 2}


def test_a_row_cut_at_its_budget_finishes_as_length_without_a_continuation():
    from covey.engine.base import SamplingParams

    engine = ScriptedEngine([(4, 1), (9, None)])
    _, view = _executor(engine)
    gen = view.generate([[5], [6]], 1, SamplingParams(max_new_tokens=4, prompt_max_new_tokens=(4, 2)))
    # row 0 has its 4 tokens: "length", not continued; row 1 was capped at 2 by the engine: not cut
    assert len(engine.calls) == 1 and gen.finish_reason == ["length", "length"] and engine.version == 1


def test_no_interrupt_without_a_call_in_flight_or_new_weights_or_the_option():
    from covey.engine.base import SamplingParams

    engine = ScriptedEngine([(2, None)])
    ex, view = _executor(engine)
    ex.publish({"w": 1}, 1)  # between calls: applied before the next call, nothing cut
    assert not engine.cut and engine.loaded == []
    gen = view.generate([[5]], 1, SamplingParams(max_new_tokens=4))
    assert engine.loaded == [(1, 1)] and gen.policy_version.tolist() == [[1, 1]] and ex._counts["interrupts"] == 0
    engine = ScriptedEngine([(2, None)])
    ex, view = _executor(engine, interrupt=False)
    assert view is engine  # the option off: the strategy calls the engine itself
    ex._generating = True
    ex.publish(None, 1)  # no new weights (a skipped step): nothing to interrupt for
    assert not engine.cut


def _cfg(tmp_path, *overrides):
    base = ["model.name=tiny-llama", "task.name=arithmetic", "task.params={digits: 1, n_train: 64, n_test: 16}",
            "rollout.prompts_per_step=4", "rollout.group_size=4", "sampling.max_new_tokens=8", "reward_workers=0",
            "log.progress=false", "log.report_to=[jsonl]", "algo.kl=null", "optim.lr=3e-3", f"log.dir={tmp_path}"]  # fmt: skip
    return load_config(None, base + list(overrides))


def test_a_weight_update_interrupts_batch_one_and_its_rows_continue_token_exactly(tmp_path):
    """eta 1: batch 1 is admitted at version 0 and held after 2 decode steps until the learner
    publishes version 1 (it waits for the hold); the cut rows continue under version 1."""
    cfg = _cfg(tmp_path, "runtime.executor=thread", "runtime.max_staleness=1", "steps=2",
               "engine.name=tests.runtime._engines:HoldingEngine", "engine.params={hold_call: 1, hold_tokens: 2}")  # fmt: skip
    trainer = Trainer(cfg, tmp_path / "run")
    engine, publish, update = trainer.engine, trainer.executor.publish, trainer.learner.update

    def publish_when_held(weights, version):
        if version == 1:
            assert engine.held.wait(120), "batch 1's generate call never started"
        publish(weights, version)

    batches = []

    def update_and_keep(batch, gen):
        batches.append(batch)
        return update(batch, gen)

    trainer.executor.publish, trainer.learner.update = publish_when_held, update_and_keep
    try:
        rows = [trainer.step() for _ in range(2)]
    finally:
        trainer.close()
    (_, _, sp1, cut), (p2, n2, sp2, more) = engine.calls[1], engine.calls[2]
    cut_rows = [i for i, r in enumerate(cut.finish_reason) if r == "abort"]
    assert cut_rows and all(int(cut.lengths[i]) == 2 for i in cut_rows)
    assert (cut.policy_version[cut.completion_mask > 0] == 0).all() and (more.policy_version[more.completion_mask > 0] == 1).all()
    assert p2 == [cut.prompt_ids[i].tolist() + cut.completion_ids[i, :2].tolist() for i in cut_rows] and n2 == 1
    assert sp2.prompt_max_new_tokens == (6,) * len(cut_rows) and sp2.seed != sp1.seed
    b = batches[1]
    assert len(b) == len(cut)
    for i in range(len(b)):
        n = int(b.lengths[i])
        assert b.completion_mask[i, :n].eq(1).all() and b.completion_mask[i, n:].eq(0).all()
        if i not in cut_rows:  # finished before the cut: as sampled, version 0
            assert b.completion_ids[i, :n].tolist() == cut.completion_ids[i, :n].tolist() and b.finish_reason[i] == cut.finish_reason[i]
            assert b.policy_version[i, :n].eq(0).all()
            continue
        j, k = cut_rows.index(i), int(more.lengths[cut_rows.index(i)])
        assert n == 2 + k  # partial + continuation, nothing lost, nothing regenerated
        assert b.completion_ids[i, :n].tolist() == cut.completion_ids[i, :2].tolist() + more.completion_ids[j, :k].tolist()
        assert torch.equal(b.behaviour_logprobs[i, :n], torch.cat([cut.logprobs[i, :2], more.logprobs[j, :k]]))
        assert b.policy_version[i, :n].tolist() == [0, 0] + [1] * k and b.finish_reason[i] == more.finish_reason[j]
    m = rows[1]
    assert m["async/staleness"] == 1.0 and m["async/interrupts"] == 1.0 and rows[0]["async/interrupts"] == 0.0
    assert m["async/interrupted_rows"] == len(cut_rows) and m["async/carried_tokens"] == 2 * len(cut_rows)
    real = b.completion_mask > 0
    old = int(((b.policy_version == 0) & real).sum())
    assert 0 < old < int(real.sum())  # the histogram shows both versions
    assert m["async/token_lag/1"] == pytest.approx(old / int(real.sum())) and m["async/token_lag/0"] == pytest.approx(1 - old / int(real.sum()))
    for k, batch in enumerate(batches):  # the bound, token by token
        lag = k - batch.policy_version[batch.completion_mask > 0]
        assert lag.min() >= 0 and lag.max() <= cfg.runtime.max_staleness


def test_tppo_runs_under_thread_within_the_bound(tmp_path):
    """tppo masks its carried tokens out of the loss: every trained token has the batch's version."""
    cfg = _cfg(tmp_path, "runtime.executor=thread", "runtime.max_staleness=1", "steps=3",
               "rollout.strategy={name: tppo, window_tokens: 3}", "algo.advantage={name: tppo}",
               "rollout.prompts_per_step=2", "rollout.group_size=2", "sampling.max_new_tokens=6")  # fmt: skip
    trainer = Trainer(cfg, tmp_path / "run")
    batches, update = [], trainer.learner.update
    trainer.learner.update = lambda batch, gen: (batches.append(batch), update(batch, gen))[1]
    try:
        rows = [trainer.step() for _ in range(cfg.steps)]
    finally:
        trainer.close()
    assert any(m["tppo/inflight"] > 0 for m in rows)  # rows were carried across steps
    for k, (batch, m) in enumerate(zip(batches, rows)):
        lag = k - batch.policy_version[batch.completion_mask > 0]  # the trained tokens
        assert lag.min() >= 0 and lag.max() <= 1 and m["async/token_lag_max"] <= m["async/staleness"] <= 1


@pytest.mark.parametrize(
    "overrides, match",
    [
        (["runtime.interrupt_on_update=true"], "needs runtime.executor: thread .got inline; inline never"),
        (["runtime.executor=ray", "runtime.interrupt_on_update=true"], "the Ray engine proxy cannot interrupt yet"),
        (["runtime.executor=thread", "runtime.interrupt_on_update=true", "engine.name=tests.runtime._engines:UninterruptibleEngine"],
         "needs an engine with interrupt.. .InterruptibleEngine.; engine 'tests.runtime._engines:UninterruptibleEngine' has none"),
        (["runtime.executor=thread", "rollout.strategy=april"], "april'?: it carries unfinished rollouts across steps and trains their earlier tokens"),
    ],
)
def test_refused_interrupt_configs(tmp_path, overrides, match):
    with pytest.raises(ConfigError, match=match):
        _cfg(tmp_path, *overrides)


@pytest.mark.parametrize(
    "overrides, on",
    [
        (["runtime.executor=thread"], True),  # the default: AReaL's
        (["runtime.executor=thread", "runtime.interrupt_on_update=false"], False),
        (["runtime.executor=thread", "engine.name=tests.runtime._engines:UninterruptibleEngine"], False),
        ([], False),
    ],
)
def test_interrupt_on_update_resolves(tmp_path, overrides, on):
    from covey.runtime.config import interrupts_on_update

    assert interrupts_on_update(_cfg(tmp_path, *overrides)) is on
