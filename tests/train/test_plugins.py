"""The runtime seams from config: a sampler and a rollout strategy given by import path train, their
state (tensors, int keys) goes through the checkpoint intact, and bad plugin configs fail early."""

import pytest
import torch

from covey.samplers import Draw
from covey.strategies import sample_groups
from covey.train.config import ConfigError, load_config
from covey.train.trainer import Trainer

PLUGINS = '''
import dataclasses

import torch
from covey.samplers import BaseSampler, Draw, Feedback
from covey.strategies import sample_groups
from covey.rollouts import Rollouts


class CountingSampler(BaseSampler):
    """Cycles through the items; counts rewards per prompt id (int keys, tensor values)."""

    def __init__(self, items, seed, *, start=0):
        super().__init__(items, seed)
        self.pos, self.seen = start, {}

    def next(self, k, group_size):
        out = [Draw(self.items[(self.pos + i) % len(self.items)], group_size + (i % 2)) for i in range(k)]  # unequal groups
        self.pos += k
        return out

    def observe(self, batch):
        for pid, r in zip(batch.prompt_id.tolist(), batch.scalar_rewards()):
            self.seen[pid] = self.seen.get(pid, torch.zeros(2)) + torch.stack([r, torch.tensor(1.0)])
        return Feedback({"sampler/tracked": float(len(self.seen))})

    def state_dict(self):
        return {"pos": self.pos, "seen": dict(self.seen)}

    def load_state_dict(self, state):
        self.pos, self.seen = state["pos"], dict(state["seen"])


class Duck:
    """Has a sampler's methods but does not subclass BaseSampler."""

    def __init__(self, items, seed):
        self.items = items

    def next(self, k):
        return self.items[:k]


class NoNext(BaseSampler):
    """Subclasses BaseSampler but never says which items to draw."""


class OldNext(BaseSampler):
    """The old contract: next(k) -> items, no group size."""

    def next(self, k):
        return self.items[:k]


class TwoRounds:
    """Draws each item's group in two halves (two engine calls), then joins them."""

    def __init__(self, *, first=1):
        self.first, self.calls = first, 0

    def rollout(self, items, ctx):
        a = sample_groups(ctx.engine, ctx.tokenizer, [dataclasses.replace(d, n=self.first) for d in ctx.draws], ctx.sampling(0))
        b = sample_groups(ctx.engine, ctx.tokenizer, [dataclasses.replace(d, n=d.n - self.first) for d in ctx.draws], ctx.sampling(1))
        batch = Rollouts.concat([a, b])  # same item order in both calls: group = item position
        batch = batch.select(torch.argsort(batch.group, stable=True))
        self.calls += 1
        return batch, {"strategy/calls": float(self.calls)}

    def state_dict(self):
        return {"calls": self.calls}

    def load_state_dict(self, state):
        self.calls = state["calls"]
'''


@pytest.fixture
def plugins(tmp_path, monkeypatch):
    (tmp_path / "my_plugins.py").write_text(PLUGINS)
    monkeypatch.syspath_prepend(str(tmp_path))
    return "my_plugins"


def _cfg(tmp_path, *overrides):
    base = ["model.name=tiny-llama", "task.params={digits: 1, n_train: 16, n_test: 4}", "rollout.prompts_per_step=3",
            "rollout.group_size=2", "sampling.max_new_tokens=4", "reward_workers=0", "log.progress=false",
            "log.tensorboard=false", "algo.kl=null", "steps=2", f"log.dir={tmp_path}"]  # fmt: skip
    return load_config(None, base + list(overrides))


def test_custom_sampler_and_strategy_by_import_path_train_and_checkpoint(tmp_path, plugins):
    cfg = _cfg(tmp_path, f"sampler={{name: '{plugins}:CountingSampler', start: 5}}",
               f"rollout.strategy={{name: '{plugins}:TwoRounds', first: 1}}")  # fmt: skip
    trainer = Trainer(cfg, tmp_path / "run")
    for _ in range(2):
        m = trainer.step()
    assert m["strategy/calls"] == 2.0 and m["sampler/tracked"] >= 3
    assert trainer.sampler.pos == 5 + 2 * 3
    seen = dict(trainer.sampler.seen)
    assert sum(int(v[1]) for v in seen.values()) == 2 * (2 + 3 + 2)  # rows: sizes 2, 3, 2 per step
    trainer.save()
    trainer.close()

    resumed = Trainer(cfg, tmp_path / "run", resume=True)
    assert resumed.step_num == 2 and resumed.sampler.pos == 11 and resumed.strategy.calls == 2
    assert resumed.sampler.seen.keys() == seen.keys() and all(isinstance(k, int) for k in resumed.sampler.seen)
    for k, v in seen.items():
        assert isinstance(resumed.sampler.seen[k], torch.Tensor) and torch.equal(resumed.sampler.seen[k], v)
    resumed.close()


def test_unequal_group_sizes_keep_items_and_groups_aligned(tmp_path):
    cfg = _cfg(tmp_path)
    trainer = Trainer(cfg, tmp_path / "run")
    items = [d.item for d in trainer.sampler.next(3, 2)]
    batch = sample_groups(trainer.engine, trainer.tokenizer, [Draw(it, n) for it, n in zip(items, [1, 3, 2])], trainer._sampling(0))
    assert batch.group.tolist() == [0, 1, 1, 1, 2, 2]
    assert [it["id"] for it in batch.items] == [items[g]["id"] for g in batch.group.tolist()]
    assert batch.prompt_id.tolist() == [items[g]["id"] for g in batch.group.tolist()]
    assert batch.policy_version is not None and int(batch.policy_version.max()) == 0
    trainer.close()


def test_policy_version_follows_the_weight_syncs(tmp_path):
    trainer = Trainer(_cfg(tmp_path), tmp_path / "run")
    trainer.step()
    batch, _ = trainer.collect()
    assert trainer.engine.version == 1
    assert set(batch.policy_version[batch.completion_mask > 0].tolist()) == {1}
    trainer.close()


@pytest.mark.parametrize(
    "override, message",
    [
        ("sampler=nope", "unknown sampler 'nope'"),
        ("sampler={name: uniform, temperature: 2}", "has no parameter(s) ['temperature']"),
        ("rollout.strategy=nope", "unknown rollout strategy 'nope'"),
        ("rollout.strategy={name: dynamic, inner: nope}", "unknown rollout strategy 'nope'"),
        ("engine={name: torch, colour: red}", "engine 'torch' has no parameter(s) ['colour']"),
        ("engine={name: torch, max_rows: lots}", "engine 'torch' parameter 'max_rows': Input should be a valid integer"),
        ("sampler={name: vade, a0: [1]}", "sampler 'vade' parameter 'a0': Input should be a valid number"),
        ("sampler=os.path:nothing_here", "has no attribute"),
        ("device=cuda:0", "device"),
    ],
)
def test_bad_plugin_configs_fail_before_any_model_loads(tmp_path, override, message):
    if override.startswith("device") and torch.cuda.is_available():
        pytest.skip("CUDA present")
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[").replace("]", r"\]")):
        _cfg(tmp_path, override)


@pytest.mark.parametrize("cls, message", [
    ("Duck", "sampler '{p}:Duck': Duck must subclass covey.samplers.BaseSampler"),
    ("NoNext", "sampler '{p}:NoNext': NoNext does not define next"),
    ("OldNext", r"sampler '{p}:OldNext': OldNext.next must take \(k, group_size\) and return a list of covey.samplers.Draw"),
])  # fmt: skip
def test_a_sampler_that_is_not_a_complete_base_sampler_is_a_config_error(tmp_path, plugins, cls, message):
    with pytest.raises(ConfigError, match=message.format(p=plugins)):
        _cfg(tmp_path, f"sampler={plugins}:{cls}")


def test_dapo_preset_wraps_the_strategy_in_dynamic_sampling(tmp_path):
    cfg = _cfg(tmp_path, "algo=dapo")
    spec = cfg.strategy_spec()
    assert spec.name == "dynamic" and spec.params["inner"] == "group"
    assert spec.params["max_rounds"] == cfg.algo.max_gen_batches


def test_sampling_methods_that_generate_within_a_step_are_selectable_as_samplers(tmp_path):
    for name, strategy in (("dars", "dars"), ("dars_b", "dars"), ("dynamic", "dynamic")):
        cfg = _cfg(tmp_path, f"sampler={{name: {name}}}")
        assert cfg.sampler_spec().name == "uniform" and cfg.strategy_spec().name == strategy
    cfg = _cfg(tmp_path, "sampler={name: dynamic, max_rounds: 3}")
    assert cfg.strategy_spec().params == {"max_rounds": 3}
    with pytest.raises(ConfigError, match="cannot be combined"):
        _cfg(tmp_path, "sampler=dars", "rollout.strategy=treepo")
    trainer = Trainer(_cfg(tmp_path, "sampler=dars", "steps=1"), tmp_path / "dars")
    assert type(trainer.strategy).__name__.lower().startswith("dars")
    trainer.step()
    trainer.close()
