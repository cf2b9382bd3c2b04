"""The engine seam: strategies reach an engine only through the protocols they declare.

A strategy runs against a MINIMAL engine that exposes nothing but the members of its declared
protocols (a proxy that raises AttributeError for anything else, also on the tree session), and
gives the same batch as on the full `TorchEngine`; the config check refuses, from the engine class
alone, an engine lacking a protocol the strategy needs (`covey config show`: exit 2)."""

import pytest
import torch
from typer.testing import CliRunner

from covey.cli import app
from covey.engine import SamplingParams, TorchEngine
from covey.engine.base import (
    ENGINE_PROTOCOLS,
    Engine,
    ForkingEngine,
    HiddenStatesEngine,
    TreeSession,
    engine_class,
    missing_protocols,
    protocol_members,
)
from covey.models import build_tiny
from covey.registry import RegistryError
from covey.strategies import STRATEGIES, RolloutContext
from covey.samplers import Draw
from covey.strategies.base import check_engine_protocols, engine_protocols


class Only:
    """`obj` seen through `protocols`: their members, nothing else (not even `len`, unless one has it)."""

    def __init__(self, obj, *protocols):
        names = set().union(*(protocol_members(p) for p in protocols))
        object.__setattr__(self, "_obj", obj)
        object.__setattr__(self, "_names", names)
        object.__setattr__(self, "reached", [])

    def __getattr__(self, name):
        if name not in self._names:
            raise AttributeError(f"{name!r} is not a member of the declared protocols")
        self.reached.append(name)
        return getattr(self._obj, name)

    def __len__(self):
        return len(self._obj)


class MinimalForking:
    """An engine with only `ForkingEngine`'s members; its tree sessions show only `TreeSession`'s."""

    pad_token_id: int
    version: int

    def __init__(self, inner: TorchEngine):
        self._inner = inner
        self.pad_token_id, self.version = inner.pad_token_id, inner.version
        self.sessions: list[Only] = []

    def generate(self, prompts, n, sampling):
        return self._inner.generate(prompts, n, sampling)

    def load_weights(self, source, version=None):
        self._inner.load_weights(source, version)
        self.version = self._inner.version

    def close(self):
        self._inner.close()

    def tree_session(self, sampling):
        s = Only(self._inner.tree_session(sampling), TreeSession)
        self.sessions.append(s)
        return s


class MinimalHidden(MinimalForking):
    def hidden_states(self, sequences):
        return self._inner.hidden_states(sequences)


class GenerateOnly:
    """An `Engine` and nothing more (a remote engine without tree forking)."""

    pad_token_id: int = 0
    version: int = 0

    def __init__(self, model, tokenizer=None):
        pass

    def generate(self, prompts, n, sampling): ...

    def load_weights(self, source, version=None): ...

    def close(self): ...


def forking_factory(model, tokenizer=None) -> MinimalForking:
    return MinimalForking(TorchEngine(model, tokenizer, dtype="fp32"))


def unannotated_factory(model, tokenizer=None):
    return MinimalForking(TorchEngine(model, tokenizer, dtype="fp32"))


class NoFacts:
    """Methods only; `pad_token_id` / `version` set in __init__ cannot be seen on the class."""

    def __init__(self, model, tokenizer=None):
        self.pad_token_id, self.version = 0, 0

    def generate(self, prompts, n, sampling): ...

    def load_weights(self, source, version=None): ...

    def close(self): ...


ITEMS = [{"id": 1, "prompt": "1+1="}, {"id": 2, "prompt": "2+5="}]


def _ctx(engine, tok, G=4, new=6):
    def score(batch):
        batch.rewards, batch.reward_names = (batch.completion_ids[:, 0] % 2 == 0).float()[:, None], ("even",)
        return {}

    return RolloutContext(engine=engine, tokenizer=tok, draws=[Draw(it, G) for it in ITEMS],
                          sampling=lambda r: SamplingParams(seed=3 + r, max_new_tokens=new, ignore_eos=True),
                          score=score, draw=lambda k: [], step=0)  # fmt: skip


@pytest.fixture(scope="module")
def tiny():
    model, tok = build_tiny("tiny-llama", seed=4)
    return TorchEngine(model, tok, dtype="fp32"), tok


def _same(a, b):
    assert torch.equal(a.completion_ids, b.completion_ids) and torch.equal(a.completion_mask, b.completion_mask)
    assert torch.allclose(a.behaviour_logprobs, b.behaviour_logprobs, atol=1e-6)
    assert a.group.tolist() == b.group.tolist() and a.tree_path == b.tree_path


@pytest.mark.parametrize("name, params", [("treepo", {"segment_tokens": 2}), ("latr", {"force_return_step": 3}),
                                          ("group", {})])  # fmt: skip
def test_strategy_runs_on_an_engine_with_only_its_declared_protocols(tiny, name, params):
    full, tok = tiny
    strat = STRATEGIES.build(name, params)
    need = STRATEGIES.get(name).caps.engine_protocols
    minimal = Only(MinimalForking(full), *need)  # the engine seen through the strategy's declaration
    assert isinstance(minimal._obj, ForkingEngine) and not isinstance(minimal._obj, HiddenStatesEngine)
    got, _ = strat.rollout(ITEMS, _ctx(minimal, tok))
    want, _ = STRATEGIES.build(name, params).rollout(ITEMS, _ctx(full, tok))
    _same(got, want)
    assert len(got) == 8 and got.validate() is got
    if name == "group":
        assert need == (Engine,) and set(minimal.reached) == {"generate"}
    else:
        assert need == (ForkingEngine,) and "tree_session" in minimal.reached and "generate" not in minimal.reached
        session = minimal._obj.sessions[-1]
        assert {"add", "fork", "decode", "rows", "decoded"} <= set(session.reached)
        if name == "latr":
            assert {"logits", "step"} <= set(session.reached)  # branching reads the next-token logits, forces tokens


def test_arrol_and_tppo_need_hidden_states_and_run_on_a_minimal_engine(tiny):
    full, tok = tiny
    for name in ("arrol", "tppo"):
        strat = STRATEGIES.build(name, {"check_tokens": 2} if name == "arrol" else {"window_tokens": 3})
        assert STRATEGIES.get(name).caps.engine_protocols == (ForkingEngine, HiddenStatesEngine)
        with pytest.raises(AttributeError, match="hidden_states"):  # a forking-only engine lacks it
            strat.rollout(ITEMS, _ctx(Only(MinimalForking(full), ForkingEngine), tok, G=2))
        strat = STRATEGIES.build(name, {"check_tokens": 2} if name == "arrol" else {"window_tokens": 3})
        minimal = Only(MinimalHidden(full), *STRATEGIES.get(name).caps.engine_protocols)
        batch, metrics = strat.rollout(ITEMS, _ctx(minimal, tok, G=2))
        assert "hidden_states" in minimal.reached and len(batch) == 4, name


def test_protocol_check_reads_the_class_without_building_it():
    every = (Engine, ForkingEngine, HiddenStatesEngine)
    assert missing_protocols(TorchEngine, every) == {}
    assert missing_protocols(MinimalForking, every) == {HiddenStatesEngine: ["hidden_states"]}
    assert missing_protocols(GenerateOnly, every) == {ForkingEngine: ["tree_session"], HiddenStatesEngine: ["hidden_states"]}
    assert missing_protocols(NoFacts, (Engine,)) == {Engine: ["pad_token_id", "version"]}  # facts must be declared
    assert engine_class(forking_factory) is MinimalForking and missing_protocols(forking_factory, (ForkingEngine,)) == {}
    assert engine_class(unannotated_factory) is None
    assert missing_protocols(unannotated_factory, (Engine, ForkingEngine)) == {ForkingEngine: ["?"]}
    assert list(protocol_members(ForkingEngine)) == ["pad_token_id", "version", "generate", "load_weights", "close",
                                                     "tree_session"]  # fmt: skip


def test_each_strategy_declares_its_engine_protocols_and_dynamic_forwards_its_inner():
    for name in ("treepo", "branch", "latr", "april"):
        assert engine_protocols(name, {}) == (ForkingEngine,), name
    for name in ("arrol", "tppo"):
        assert engine_protocols(name, {}) == (ForkingEngine, HiddenStatesEngine), name
    for name in ("group", "dynamic", "dars", "igrpo", "cog_rethinker"):
        assert engine_protocols(name, {}) == (Engine,), name
    for name in STRATEGIES:  # every registered strategy names protocols the config check knows
        assert set(engine_protocols(name, {})) <= set(ENGINE_PROTOCOLS), name
    assert engine_protocols("dynamic", {"inner": "arrol"}) == (Engine, ForkingEngine, HiddenStatesEngine)
    assert engine_protocols("dynamic", {}) == (Engine,)  # inner defaults to group
    assert engine_protocols(f"{__name__}:GenerateOnly", {}) == (Engine,)  # undeclared: the base protocol


def test_check_names_the_strategy_the_protocol_and_what_is_missing():
    check_engine_protocols("treepo", {}, "torch")
    check_engine_protocols("group", {}, f"{__name__}:GenerateOnly")
    with pytest.raises(RegistryError) as e:
        check_engine_protocols("dynamic", {"inner": "treepo"}, f"{__name__}:GenerateOnly")
    assert str(e.value) == (f"rollout.strategy 'dynamic' (wrapping 'treepo') needs an engine with ForkingEngine (tree forking); "
                            f"engine '{__name__}:GenerateOnly' does not provide ForkingEngine (no tree_session)")  # fmt: skip
    with pytest.raises(RegistryError, match=r"does not provide HiddenStatesEngine \(no hidden_states\)$"):
        check_engine_protocols("tppo", {}, f"{__name__}:forking_factory")
    with pytest.raises(RegistryError, match="does not annotate the engine class it returns"):
        check_engine_protocols("latr", {}, f"{__name__}:unannotated_factory")
    check_engine_protocols("latr", {}, f"{__name__}:forking_factory")


BASE = ["model.name=tiny-llama", "task.params={digits: 1, n_train: 8, n_test: 4}", "reward_workers=0"]


def test_config_show_refuses_an_engine_without_tree_forking_in_one_line():
    runner = CliRunner()
    engine = f"engine={__name__}:GenerateOnly"
    res = runner.invoke(app, ["config", "show", *BASE, "rollout.strategy=treepo", engine])
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output
    lines = [ln for ln in res.output.splitlines() if "ForkingEngine" in ln]
    assert lines == [f"  rollout.strategy 'treepo' needs an engine with ForkingEngine (tree forking); engine "
                     f"'{__name__}:GenerateOnly' does not provide ForkingEngine (no tree_session)"], res.output  # fmt: skip
    assert res.output.startswith("error: ")
    # the same engine serves group; dynamic sampling (algo: dapo) over treepo is refused the same way
    assert runner.invoke(app, ["config", "show", *BASE, engine]).exit_code == 0
    res = runner.invoke(app, ["config", "show", *BASE, "rollout.strategy=treepo", "algo.dynamic_sampling=true", engine])
    assert res.exit_code == 2 and "'dynamic' (wrapping 'treepo') needs an engine with ForkingEngine" in res.output
