"""Reward columns: one name per column, and DAPO's overlong penalty counted once (`algo.overlong` is
its one home: the `overlong` reward next to it is refused when the config is read)."""

from __future__ import annotations

import pytest
import torch
from typer.testing import CliRunner

from covey.algos.presets import resolve_algo
from covey.cli import app
from covey.rewards import RewardRunner, RewardSpec
from covey.rewards.scoring import Scorer, shaping_terms
from covey.rollouts import Rollouts
from covey.train.config import ConfigError, load_config

OVERLONG = "{name: overlong, max_len: 8, buffer_len: 4}"


def test_dapo_with_the_overlong_reward_is_refused_naming_algo_overlong():
    for rewards in (f"rewards=[{OVERLONG}]", "rewards=[{name: overlong, alias: soft, max_len: 8, buffer_len: 4}]",
                    "rewards=[{name: 'covey.rewards.length:SoftOverlongPunishment', max_len: 8, buffer_len: 4}]"):  # fmt: skip
        with pytest.raises(ConfigError, match=r"rewards\[0\]: reward '.*' is the overlong penalty that algo.overlong "
                                              r"\(set by the dapo preset\) already adds, so it would count twice: remove it "
                                              r"from rewards and configure algo.overlong instead"):  # fmt: skip
            load_config(None, ["algo=dapo", rewards])
    with pytest.raises(ConfigError, match=r"that algo.overlong already adds"):  # set by the user, not by a preset
        load_config(None, ["algo.overlong={buffer_len: 2}", f"rewards=[{OVERLONG}]"])
    cfg = load_config(None, ["algo=dapo", "algo.overlong=null", f"rewards=[{OVERLONG}]"])  # the reward alone: fine
    assert cfg.algo.overlong is None and [r.label for r in cfg.rewards] == ["overlong"]


def test_two_columns_with_one_name_are_refused():
    with pytest.raises(ConfigError, match=r"rewards\[1\]: a second reward column named 'format' \(rewards\[0\] has it\)"):
        load_config(None, ["rewards=[{name: format}, {name: format, tags: [answer]}]"])
    load_config(None, ["rewards=[{name: format}, {name: format, alias: answer_tag, tags: [answer]}]"])
    with pytest.raises(ConfigError, match=r"rewards\[0\]: the reward column name 'overlong' is taken by the shaping term"):
        load_config(None, ["algo=dapo", "rewards=[{name: format, alias: overlong}]"])
    with pytest.raises(ConfigError, match=r"rewards\[0\]: the reward column name 'kl_penalty'"):
        load_config(None, ["algo.kl={name: k1, coef: 0.1, mode: reward}", "rewards=[{name: format, alias: kl_penalty}]"])


def test_config_show_refuses_it_with_exit_2():
    res = CliRunner().invoke(app, ["config", "show", "model.name=tiny-llama", "algo=dapo", f"rewards=[{OVERLONG}]"])
    assert res.exit_code == 2 and "would count twice" in res.output


def _batch(lengths: list[int], t: int = 8) -> Rollouts:
    n = len(lengths)
    mask = (torch.arange(t)[None, :] < torch.tensor(lengths)[:, None]).float()
    return Rollouts(
        prompt_ids=[torch.tensor([1]) for _ in range(n)], completion_ids=torch.ones(n, t, dtype=torch.long),
        completion_mask=mask, behaviour_logprobs=-mask, group=torch.zeros(n, dtype=torch.long),
        prompt_id=torch.zeros(n, dtype=torch.long), items=[{"id": 0, "prompt": "q", "answer": "1"}] * n,
    )  # fmt: skip


def _accuracy(prompts, completions, **kw):
    return [1.0] * len(completions)


def test_dapo_scoring_counts_the_overlong_penalty_once():
    algo = resolve_algo({"preset": "dapo", "overlong": {"buffer_len": 4}})
    runner = RewardRunner([(_accuracy, RewardSpec(name="accuracy"))], workers=0)
    scorer = Scorer(runner, lambda b: ["x"] * len(b), shaping_terms(algo, 8, lambda b: None))
    batch = _batch([4, 6, 8, 8])  # in budget, half into the soft zone, at the budget (twice)
    m = scorer(batch)
    assert batch.reward_names == ("accuracy", "overlong")
    assert batch.reward("overlong").tolist() == [0.0, -0.5, -1.0, -1.0]
    assert m["reward/mean"] == pytest.approx(1.0 + (0.0 - 0.5 - 1.0 - 1.0) / 4)  # -0.625 penalty, not twice that
    assert m["reward/overlong/mean"] == pytest.approx(-0.625)
    runner.close()


def test_scorer_refuses_a_column_name_twice_at_run_time_too():
    algo = resolve_algo({"preset": "dapo", "overlong": {"buffer_len": 4}})
    runner = RewardRunner([(_accuracy, RewardSpec(name="overlong"))], workers=0)  # e.g. from the Python API
    scorer = Scorer(runner, lambda b: ["x"] * len(b), shaping_terms(algo, 8, lambda b: None))
    with pytest.raises(ValueError, match=r"reward columns \['overlong'\] appear twice"):
        scorer(_batch([4, 8]))
    runner.close()
