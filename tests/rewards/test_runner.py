"""RewardRunner: the [N, K] matrix, workers, timeouts, failure fallbacks and the stop rule."""

import logging

import pytest
import torch

import _runner_rewards as rr
from covey.rewards import REWARDS, RewardFailure, RewardRunner, RewardSpec, get_reward


@pytest.fixture(scope="module")
def pool_runner():
    runner = RewardRunner(
        [rr.length_reward, {"name": "_runner_rewards:flaky", "timeout_s": 2.0, "fallback": -1.0}], workers=2
    )
    yield runner
    runner.close()


def test_matrix_names_weights_and_weighted_sum():
    runner = RewardRunner(
        [{"name": "_runner_rewards:length_reward", "weight": 0.5}, {"name": "_runner_rewards:echo_column", "weight": 2.0}],
        workers=0,
    )
    batch = runner(["p"] * 3, ["a", "bb", ""], score=[1.0, 0.0, -1.0])
    assert batch.names == ("length_reward", "echo_column")
    assert batch.rewards.dtype == torch.float32 and batch.rewards.shape == (3, 2)
    assert batch.rewards.tolist() == [[1.0, 1.0], [2.0, 0.0], [0.0, -1.0]]
    # total = 0.5 * length + 2 * score: 0.5 + 2 = 2.5; 1 + 0 = 1; 0 - 2 = -2
    assert batch.total.tolist() == [2.5, 1.0, -2.0]
    assert batch.weights.tolist() == [0.5, 2.0]
    assert batch.metrics["reward/length_reward/mean"] == pytest.approx(1.0)
    assert batch.metrics["reward/total/mean"] == pytest.approx(0.5)
    assert not batch.failed.any()


def test_trl_reward_functions_work_unchanged():
    from trl.rewards import think_format_reward

    runner = RewardRunner([think_format_reward, rr.trl_style], workers=0)
    completions = [[{"role": "assistant", "content": "<think>x</think>4"}], [{"role": "assistant", "content": "5"}]]
    batch = runner(["q", "q"], completions, solution=["<think>x</think>4", "6"])
    assert batch.rewards.tolist() == [[1.0, 1.0], [0.0, 0.0]]


def test_workers_match_in_process(pool_runner):
    completions = ["a", "nan", "ccc", "none", "ee", "f", "boom", "hh"]
    inline = RewardRunner([rr.length_reward, {"name": "_runner_rewards:flaky", "fallback": -1.0}], workers=0)
    a = pool_runner(["p"] * 8, completions)
    b = inline(["p"] * 8, completions)
    assert torch.equal(a.rewards, b.rewards) and torch.equal(a.failed, b.failed)


def test_one_bad_sample_does_not_fail_its_neighbours(caplog):
    runner = RewardRunner([rr.length_reward, {"name": "_runner_rewards:flaky", "fallback": -1.0}], workers=2)
    with caplog.at_level(logging.WARNING):
        batch = runner(["p"] * 6, ["ok", "boom", "nan", "none", "ok", "ok"])
    runner.close()
    # flaky raised on the whole chunk, then was retried per sample: only "boom" is an exception;
    # "none" (None: not applicable) is no failure and gets 0.0, not the fallback
    assert batch.rewards[:, 1].tolist() == [1.0, -1.0, -1.0, 0.0, 1.0, 1.0]
    assert batch.failed[:, 1].tolist() == [False, True, True, False, False, False]
    assert batch.missing[:, 1].tolist() == [False, False, False, True, False, False]
    m = batch.metrics
    assert (m["reward/flaky/failures/exception"], m["reward/flaky/failures/nan"], m["reward/flaky/none"]) == (1.0, 1.0, 1.0)
    assert "reward/flaky/failures/none" not in m
    assert m["reward/flaky/failures"] == 2.0 and m["reward/flaky/failures/timeout"] == 0.0
    assert m["reward/flaky/mean"] == pytest.approx(1 / 5)  # over the 5 samples it applies to: (1 - 1 - 1 + 1 + 1) / 5
    assert "ValueError: boom completion" in caplog.text


def test_first_traceback_of_each_kind_is_logged_once(caplog):
    runner = RewardRunner([{"name": "_runner_rewards:flaky", "alias": "f"}], workers=0)
    with caplog.at_level(logging.WARNING):
        runner(["p"] * 2, ["boom", "ok"])
        runner(["p"] * 2, ["boom", "ok"])
        runner(["p"], ["nan"])
    assert caplog.text.count("ValueError: boom completion") == 1
    assert caplog.text.count("(nan)") == 1


def test_hanging_reward_times_out_and_the_pool_recovers(pool_runner):
    batch = pool_runner(["p"] * 4, ["ok", "ok", "hang", "ok"])
    # 2 workers -> chunks [0, 1] and [2, 3]; the second chunk hung and was re-scored sample by sample,
    # so only sample 2 times out
    assert batch.failed[:, 1].tolist() == [False, False, True, False]
    assert batch.metrics["reward/flaky/failures/timeout"] == 1.0
    assert batch.rewards[:, 0].tolist() == [2.0, 2.0, 4.0, 2.0]  # the other reward was unaffected
    again = pool_runner(["p"] * 4, ["ok"] * 4)
    assert not again.failed.any()


def test_crashing_worker_is_replaced(pool_runner):
    batch = pool_runner(["p"] * 2, ["die", "die"])
    assert batch.failed[:, 1].all() and batch.metrics["reward/flaky/failures/exception"] == 2.0
    assert not pool_runner(["p"] * 2, ["ok", "ok"]).failed.any()


def test_reward_failing_everywhere_stops_the_run_after_max_failed_steps():
    runner = RewardRunner([rr.always_raises, rr.length_reward], workers=0, max_failed_steps=3)
    runner(["p"], ["a"])
    runner(["p"], ["a"])
    with pytest.raises(RewardFailure, match="'always_raises' failed on every sample it applies to for 3 consecutive") as e:
        runner(["p"], ["a"])
    assert "RuntimeError: this reward is broken" in str(e.value)


def test_a_partly_working_step_resets_the_failure_count():
    runner = RewardRunner([rr.flaky], workers=0, max_failed_steps=2)
    runner(["p"], ["nan"])
    runner(["p", "p"], ["nan", "ok"])  # one sample scored: not a fully failed step
    runner(["p"], ["nan"])
    runner(["p", "p"], ["none", "none"])  # applies nowhere: neither resets nor adds to the count
    with pytest.raises(RewardFailure, match="'flaky'"):
        runner(["p", "p"], ["nan", "none"])  # failed on every sample it applies to


def test_groups_are_never_split_across_calls():
    group = [0, 0, 0, 1, 1, 2, 2, 2, 2, 3]
    sizes = {0: 3, 1: 2, 2: 4, 3: 1}
    for workers, chunk_size in ((0, None), (2, None), (2, 1)):
        runner = RewardRunner([rr.GroupSizes(sizes)], workers=workers, chunk_size=chunk_size)
        batch = runner(["p"] * 10, ["c"] * 10, group=torch.tensor(group))
        runner.close()
        assert batch.rewards[:, 0].tolist() == [float(sizes[g]) for g in group]
        assert not batch.failed.any()


def test_math_verify_runs_in_worker_main_thread():
    # a symbolic answer takes math-verify's signal.alarm path, which works only in a main thread
    with RewardRunner([{"name": "math"}, rr.uses_alarm], workers=1) as runner:
        batch = runner(["q"] * 2, [r"\boxed{\frac{\sqrt{2}}{2}}", r"\boxed{\sqrt{3}}"], answer=[r"1/\sqrt{2}"] * 2)
    assert batch.rewards.tolist() == [[1.0, 1.0], [0.0, 1.0]] and not batch.failed.any()


def test_reward_metrics_are_averaged_into_the_batch_metrics():
    runner = RewardRunner([{"name": "majority_vote"}], workers=0)
    batch = runner(["q"] * 4, ["#### 1", "#### 1", "#### 2", "#### 3"], group=[0, 0, 1, 1], answer=["1", "1", "3", "3"])
    # group 0: label 1 (right), ratio 2/2; group 1: tie 2 vs 3 -> first seen 2 (wrong), ratio 1/2
    assert batch.metrics["reward/majority_vote/label_accuracy"] == 0.5
    assert batch.metrics["reward/majority_vote/majority_ratio"] == 0.75


def test_empty_batch_gives_empty_matrix():
    batch = RewardRunner([rr.length_reward], workers=0)([], [])
    assert batch.rewards.shape == (0, 1) and batch.total.shape == (0,)


def test_unknown_reward_lists_the_known_ones():
    with pytest.raises(ValueError, match="unknown reward 'fromat'.*format"):
        RewardRunner([{"name": "fromat"}], workers=0)


def test_bad_params_and_fields_are_named():
    with pytest.raises(ValueError, match="no parameter"):
        get_reward("math", tol2=1)
    with pytest.raises(ValueError, match=r"reward 'format' has no parameter\(s\) \['colour'\]"):
        get_reward("format", colour="red")
    with pytest.raises(ValueError, match="timeout_s"):
        RewardSpec(name="format", timeout_s=0)
    spec = RewardSpec(name="format", wieght=2)  # an unknown key is a parameter of the reward, refused there
    assert spec.params == {"wieght": 2} and spec.weight == 1.0
    with pytest.raises(ValueError, match=r"has no parameter\(s\) \['wieght'\]"):
        RewardRunner([spec.model_dump()], workers=0)


def test_duplicate_names_need_an_alias():
    with pytest.raises(ValueError, match="alias"):
        RewardRunner([{"name": "format"}, {"name": "format", "params": {"tags": ["answer"]}}], workers=0)
    runner = RewardRunner([{"name": "format"}, {"name": "format", "alias": "answer_tag", "params": {"tags": ["answer"]}}],
                          workers=0)
    assert runner.names == ("format", "answer_tag")


def test_mismatched_columns_are_named():
    runner = RewardRunner([rr.echo_column], workers=0)
    with pytest.raises(ValueError, match="column 'score' has 1 entries but there are 2"):
        runner(["p", "p"], ["a", "b"], score=[1.0])


def test_unpicklable_reward_runs_in_process_with_workers():
    runner = RewardRunner([lambda prompts, completions, **_: [0.5] * len(completions)], workers=2)
    assert runner.entries[0].in_process and runner(["p"], ["a"]).rewards.tolist() == [[0.5]]


def test_builtin_rewards_are_registered():
    assert {"math", "boxed_format", "format", "length", "overlong", "bleu", "majority_vote", "code"} <= set(REWARDS)


def test_apply_to_writes_rollouts_fields():
    class Box:
        rewards = reward_names = reward_weights = None

    box = Box()
    RewardRunner([rr.length_reward], workers=0)(["p"], ["ab"]).apply_to(box)
    assert box.rewards.tolist() == [[2.0]] and box.reward_names == ("length_reward",)
    assert box.reward_weights.tolist() == [1.0]


def test_ready_callable_with_spec_takes_label_weight_and_fallback():
    def verifier(prompts, completions, **_):
        return [1.0 if c == "ok" else None if c == "bad" else float("nan") for c in completions]

    spec = RewardSpec(name="accuracy", weight=2.0, fallback=-1.0)
    batch = RewardRunner([(verifier, spec)], workers=0)(["p", "p", "p"], ["ok", "bad", 5])
    assert batch.names == ("accuracy",)
    # "bad" -> None: not applicable, 0.0 (not the fallback); 5 -> NaN, a failure: the fallback
    assert batch.rewards[:, 0].tolist() == [1.0, 0.0, -1.0] and batch.total.tolist() == [2.0, 0.0, -2.0]
    assert batch.missing[:, 0].tolist() == [False, True, False] and batch.failed[:, 0].tolist() == [False, False, True]


def test_none_means_not_applicable_as_in_trl_multi_task_rewards(caplog):
    # TRL's multi-task pattern: each reward scores only its own task's samples and returns None elsewhere.
    # TRL: rewards_per_func[None] = NaN; total = nansum(rewards_per_func * weights, dim=1); means are nanmean.
    def math_reward(completions, task, **_):
        return [float(c == "4") if t == "math" else None for c, t in zip(completions, task)]

    def code_reward(completions, task, **_):
        return [0.5 if t == "code" else None for c, t in zip(completions, task)]

    runner = RewardRunner([(math_reward, RewardSpec(name="math_reward", weight=2.0)),
                           (code_reward, RewardSpec(name="code_reward", weight=3.0))], workers=0, max_failed_steps=1)
    task = ["math", "math", "code", "other"]
    with caplog.at_level(logging.WARNING):
        for _ in range(3):  # three steps in which code_reward never applies to "math" rows: no RewardFailure
            batch = runner(["p"] * 4, ["4", "5", "x", "y"], task=task)
    assert batch.rewards.tolist() == [[1.0, 0.0], [0.0, 0.0], [0.0, 0.5], [0.0, 0.0]]
    assert batch.total.tolist() == [2.0, 0.0, 1.5, 0.0]  # nansum: 2*1, 2*0, 3*0.5, all-None row -> 0
    assert not batch.failed.any()
    assert batch.missing.tolist() == [[False, True], [False, True], [True, False], [True, True]]
    m = batch.metrics
    assert m["reward/math_reward/mean"] == 0.5 and m["reward/code_reward/mean"] == 0.5  # nanmean
    assert m["reward/math_reward/std"] == 0.5 and m["reward/code_reward/std"] == 0.0
    assert (m["reward/math_reward/none"], m["reward/code_reward/none"], m["reward/unscorable"]) == (2.0, 3.0, 1.0)
    assert m["reward/math_reward/failures"] == 0.0 and m["reward/total/mean"] == pytest.approx(3.5 / 3)
    assert caplog.text.count("every reward returned None for 1 sample(s) (first: #3)") == 1
    only_none = runner(["p"], ["z"], task=["other"])  # no reward applies anywhere: NaN means, like TRL's nanmean
    assert only_none.metrics["reward/math_reward/mean"] != only_none.metrics["reward/math_reward/mean"]


@pytest.mark.parametrize("workers", [0, 1])
def test_async_rewards_are_awaited_in_process_and_in_workers(workers):
    async def closure(completions, **_):  # a closure: always in-process
        return [1.0 for _ in completions]

    with RewardRunner([rr.async_length, closure], workers=workers) as runner:
        batch = runner(["p"] * 3, ["ab", "skip", "abcd"])
        assert runner.entries[0].in_process == (workers == 0) and runner.entries[1].in_process
    assert batch.rewards.tolist() == [[2.0, 1.0], [0.0, 1.0], [4.0, 1.0]]
    assert batch.missing[:, 0].tolist() == [False, True, False] and not batch.failed.any()


def test_async_reward_past_its_timeout_fails_with_kind_timeout():
    runner = RewardRunner([{"name": "_runner_rewards:async_hang", "timeout_s": 0.3}], workers=0)
    batch = runner(["p"], ["a"])
    assert batch.failed.all() and batch.metrics["reward/async_hang/failures/timeout"] == 1.0


def test_async_reward_inside_a_running_event_loop():
    import asyncio

    async def main():  # e.g. a notebook: asyncio.run cannot nest, the reward runs on a helper thread's loop
        return RewardRunner([rr.async_length], workers=0)(["p"], ["abc"]).rewards.tolist()

    assert asyncio.run(main()) == [[3.0]]
