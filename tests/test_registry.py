"""covey.registry: one Registry for every kind, one error type, one spec shape, import paths for
every kind (tasks and rewards included), and `covey list` over all of them."""

from __future__ import annotations

import textwrap

import pytest
from typer.testing import CliRunner

from covey.cli import app
from covey.registry import Registry, RegistryError, Spec

runner = CliRunner()

USER = '''
from covey.tasks import Arithmetic


class Doubled:
    """Arithmetic with two-digit numbers by default."""

    def __init__(self, *, digits: int = 2, n_train: int = 8):
        self.inner = Arithmetic(digits=digits, n_train=n_train, n_test=4)
        self.name, self.answer_format, self.reward = "doubled", self.inner.answer_format, self.inner.reward

    def examples(self, split="train"):
        return self.inner.examples(split)


def shout(prompts, completions, *, bonus: float = 1.0, **kwargs):
    return [bonus if c.isupper() else 0.0 for c in completions]
'''


@pytest.fixture
def user(tmp_path, monkeypatch):
    (tmp_path / "user_ext.py").write_text(textwrap.dedent(USER))
    monkeypatch.syspath_prepend(str(tmp_path))
    return "user_ext"


def _toy() -> Registry:
    reg = Registry("widget", context=("size",))

    @reg.register("plain", paper="A Paper", arxiv="1234.5678")
    class Plain:
        """A plain widget."""

        def __init__(self, size, *, colour: str = "red", count: int = 1):
            self.size, self.colour, self.count = size, colour, count

    @reg.register("needs")
    def needs(size, *, shape: str):
        """Needs a shape."""
        return (size, shape)

    return reg


def test_entries_carry_summary_paper_and_defaults():
    reg = _toy()
    e = reg["plain"]
    assert (e.kind, e.summary, e.paper, e.arxiv) == ("widget", "A plain widget.", "A Paper", "1234.5678")
    assert e.defaults == {"colour": "red", "count": 1} and reg["needs"].defaults == {}
    assert list(reg) == ["plain", "needs"] and "plain" in reg and len(reg) == 2


def test_parameters_are_checked_by_name_type_and_presence():
    reg = _toy()
    assert reg.check_params("plain", {"count": "3"}) == {"count": 3}  # coerced like the rest of the config
    with pytest.raises(RegistryError, match=r"widget 'plain' has no parameter\(s\) \['size'\]; its parameters: colour, count"):
        reg.check_params("plain", {"size": 2})  # a context argument is not a parameter
    with pytest.raises(RegistryError, match=r"widget 'plain' parameter 'count': Input should be a valid integer"):
        reg.check_params("plain", {"count": "many"})
    with pytest.raises(RegistryError, match=r"widget 'needs' needs parameter\(s\) \['shape'\]"):
        reg.check_params("needs", {})
    w = reg.build("plain", {"colour": "blue"}, 7)
    assert (w.size, w.colour, w.count) == (7, "blue", 1)
    assert reg["needs"].bind({"shape": "square"})(3) == (3, "square")


def test_unknown_names_bad_paths_and_double_registration_are_registry_errors():
    reg = _toy()
    assert issubclass(RegistryError, ValueError)
    with pytest.raises(RegistryError, match=r"unknown widget 'plian'; known: needs, plain; or give an import path"):
        reg.get("plian")
    with pytest.raises(RegistryError, match="cannot import module 'no_such_module_xyz'"):
        reg.get("no_such_module_xyz:Thing")
    with pytest.raises(RegistryError, match="has no attribute 'nothing'"):
        reg.get("os.path:nothing")
    with pytest.raises(RegistryError, match="is a str, not a function or class"):
        reg.get("os:sep")
    with pytest.raises(RegistryError, match="registered twice"):
        reg.register("plain")(lambda size: None)
    with pytest.raises(RegistryError, match="may not contain ':'"):
        reg.register("a:b")(lambda size: None)


def test_import_path_must_take_the_context():
    reg = Registry("widget", context=("size", "seed"))
    with pytest.raises(RegistryError, match=r"widget 'os:getcwd' has signature \(\).*takes 2 positional input\(s\) \(size, seed\)"):
        reg.get("os:getcwd")


@pytest.mark.parametrize(
    "raw, name, params",
    [
        ("grpo", "grpo", {}),
        ({"name": "ppo_clip", "eps_high": 0.28}, "ppo_clip", {"eps_high": 0.28}),
        ({"name": "length", "params": {"target": 4}}, "length", {"target": 4}),
        ({"name": "x", "a": 1, "params": {"b": 2}}, "x", {"a": 1, "b": 2}),
    ],
)
def test_spec_reads_every_form_and_writes_one(raw, name, params):
    spec = Spec.model_validate(raw)
    assert (spec.name, spec.params) == (name, params)
    assert spec.model_dump() == {"name": name, "params": params}
    assert Spec.model_validate(spec.model_dump()) == spec


def test_spec_refuses_a_parameter_given_twice_and_a_non_mapping_params():
    with pytest.raises(ValueError, match=r"parameter\(s\) \['a'\] given both as keys and under params"):
        Spec.model_validate({"name": "x", "a": 1, "params": {"a": 2}})
    with pytest.raises(ValueError, match="params"):
        Spec.model_validate({"name": "x", "params": [1, 2]})


def test_tasks_and_rewards_by_import_path(user):
    from covey.rewards import get_reward
    from covey.tasks import get_task
    from covey.train.config import load_config
    from covey.train.setup import check_run

    task = get_task(f"{user}:Doubled", digits=1)
    assert len(task.examples("train")) == 8
    with pytest.raises(RegistryError, match=rf"task '{user}:Doubled' has no parameter\(s\) \['digitz'\]"):
        get_task(f"{user}:Doubled", digitz=1)
    fn = get_reward(f"{user}:shout", bonus=2.0)
    assert fn(prompts=["q", "q"], completions=["LOUD", "quiet"]) == [2.0, 0.0]
    cfg = load_config(None, [f"task={{name: '{user}:Doubled', n_train: 4}}", f"rewards=[{{name: '{user}:shout', bonus: 0.5}}]",
                             "reward_workers=0"])  # fmt: skip
    assert check_run(cfg).name == "doubled"


def test_bad_import_path_in_config_show_is_one_error_line_exit_2(user):
    res = runner.invoke(app, ["config", "show", "model.name=tiny-llama", f"task.name={user}:Nope", "reward_workers=0"])
    assert res.exit_code == 2 and f"error: task '{user}:Nope': module '{user}' has no attribute 'Nope'" in res.output


def test_covey_list_shows_every_registry_and_algos_is_its_algorithm_part():
    res = runner.invoke(app, ["list"])
    assert res.exit_code == 0, res.output
    for kind in ("task (task)", "reward (rewards)", "sampler (sampler)", "sampler preset (sampler)",
                 "strategy (rollout.strategy)", "engine (engine)", "advantage (algo.advantage)", "surrogate",
                 "aggregation", "kl (algo.kl)", "correction", "preset (algo.preset)"):  # fmt: skip
        assert kind in res.output, kind
    for name in ("arithmetic", "overlong", "vade", "brorl", "treepo", "torch", "grpo", "ppo_clip", "k3", "tis", "dapo"):
        assert name in res.output, name
    algos = runner.invoke(app, ["algos"])
    assert algos.exit_code == 0 and "ppo_clip" in algos.output and "2402.03300" in algos.output
    assert "vade" not in algos.output and "arithmetic" not in algos.output
    only = runner.invoke(app, ["list", "preset"])
    assert "dapo" in only.output and "ppo_clip" not in only.output
    bad = runner.invoke(app, ["list", "bogus"])
    assert bad.exit_code == 2 and "unknown kind(s) ['bogus']" in bad.output


def test_caps_are_declared_on_the_entry_validated_and_defaulted():
    from covey.registry import Caps

    class Flags(Caps):
        fast: bool = False
        sizes: tuple[int, ...] = ()

    reg = Registry("widget", caps=Flags)

    @reg.register("plain")
    def plain():
        """No declaration."""

    @reg.register("given", caps=Flags(fast=True))
    def given():
        """Declared at registration."""

    @reg.register("attr")
    class Attr:
        """Declared as a class attribute, inherited by a subclass."""

        caps = Flags(sizes=(2, 3))

    @reg.register("sub")
    class Sub(Attr):
        """Inherits its base's declaration."""

    @reg.register("later")
    def later():
        """Declared after registration (read when first needed)."""

    later.caps = {"fast": True}

    @reg.register("wrong")
    def wrong():
        """Declares another kind's model."""

    wrong.caps = Caps()

    @reg.register("typo")
    def typo():
        """Declares a field its kind has not."""

    typo.caps = {"fsat": True}

    assert reg.get("plain").caps == Flags() and reg.get("plain").caps.declared() == {}
    assert reg.get("given").caps.fast and reg.get("given").caps.declared() == {"fast": True}
    assert reg.get("attr").caps.sizes == (2, 3) and reg.get("sub").caps.sizes == (2, 3)
    assert reg.get("later").caps == Flags(fast=True)
    with pytest.raises(RegistryError, match="widget 'wrong' declares caps of type Caps; a widget declares Flags"):
        reg.get("wrong").caps
    with pytest.raises(RegistryError, match="widget 'typo': bad caps"):
        reg.get("typo").caps


def test_every_registered_entry_declares_valid_caps_of_its_kind():
    from covey.cli import _catalogue
    from covey.engine import ENGINES
    from covey.strategies import STRATEGIES
    from covey.strategies.base import StrategyCaps

    from covey.algos import REGISTRIES
    from covey.likelihood import LIKELIHOODS
    from covey.preference import PAIRS, PREFERENCE_LOSSES
    from covey.rewards import REWARDS
    from covey.samplers import SAMPLERS
    from covey.tasks import TASKS

    _catalogue()  # imports every registering module
    for reg in (*REGISTRIES.values(), LIKELIHOODS, PAIRS, PREFERENCE_LOSSES, REWARDS, SAMPLERS, TASKS, ENGINES, STRATEGIES):
        for name in reg:
            assert isinstance(reg.get(name).caps, reg.caps), (reg.kind, name)
    # the declarations the config checks rely on
    assert STRATEGIES.get("tppo").caps.carries_rollouts and not STRATEGIES.get("tppo").caps.trains_carried_tokens
    assert STRATEGIES.get("april").caps.carries_rollouts and STRATEGIES.get("april").caps.trains_carried_tokens
    assert STRATEGIES.get("dynamic").caps.inner({"inner": "treepo"}) == ("treepo", {})
    group = STRATEGIES.get("group").caps  # plain sampling; it provides ArenaRL's greedy anchor row only when asked
    assert group.engine_protocols == StrategyCaps().engine_protocols and not group.carries_rollouts
    assert group.provides({"greedy_first": True}) == ("greedy_first",) and group.provides({}) == ()
    assert ENGINES.get("masked_diffusion").caps.family == "masked_diffusion" and ENGINES.get("torch").caps.family == "causal"


def test_capabilities_set_as_separate_attributes_still_count_with_a_warning(caplog):
    from covey.engine.base import ForkingEngine
    from covey.strategies.base import StrategyCaps

    reg = Registry("rollout strategy", caps=StrategyCaps)

    @reg.register("old")
    class Old:
        """Declares its needs the way strategies did before `caps`."""

        engine_protocols = (ForkingEngine,)
        carries_rollouts = True

        @staticmethod
        def inner_strategy(params):
            return "group", {}

    with caplog.at_level("WARNING", logger="covey"):
        caps = reg.get("old").caps
    assert caps.engine_protocols == (ForkingEngine,) and caps.carries_rollouts and caps.inner({}) == ("group", {})
    assert "declares carries_rollouts, engine_protocols, inner as attributes, which is deprecated" in caplog.text


def test_every_integration_module_of_the_test_tiers_exists():
    from pathlib import Path

    from tests.conftest import INTEGRATION

    tests = Path(__file__).parent
    assert not [m for m in sorted(INTEGRATION) if not (tests / m).is_file()]
