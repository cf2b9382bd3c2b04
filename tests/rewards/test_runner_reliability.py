"""RewardRunner under failure: overflow, exits, hangs, stray child processes, bad returns, TRL's chat format,
and rewards defined in the user's script."""

import logging
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import _runner_rewards as rr
from covey.rewards import RewardFailure, RewardRunner, RewardSpec
from covey.rewards import runner as runner_module

TESTS_DIR = str(Path(__file__).parent)
CHAT = [{"role": "user", "content": "q"}]


def _alive(pid: int) -> bool:
    """True while `pid` runs (a zombie waiting for its parent counts as dead)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _dead_soon(pid: int, within_s: float = 3.0) -> bool:
    end = time.monotonic() + within_s
    while time.monotonic() < end:
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return False


def _pids(path: Path) -> list[int]:
    return [int(x) for x in path.read_text().split()]


def _run_script(tmp_path: Path, body: str) -> subprocess.CompletedProcess:
    script = tmp_path / "script.py"
    script.write_text(f"import sys\nsys.path.insert(0, {TESTS_DIR!r})\n" + body)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)


# ---------------------------------------------------------------- 1. scores beyond float32
def test_score_beyond_float32_is_an_overflow_fallback():
    runner = RewardRunner([{"name": "_runner_rewards:huge", "fallback": -1.0}], workers=0)
    batch = runner(["p"] * 3, ["huge", "ok", "neg"])
    assert batch.rewards[:, 0].tolist() == [-1.0, 1.0, -1.0]
    assert batch.failed[:, 0].tolist() == [True, False, True]
    assert batch.metrics["reward/huge/failures/overflow"] == 2.0 and batch.metrics["reward/huge/failures"] == 2.0


# ---------------------------------------------------------------- 2. in-process exits and hangs
@pytest.mark.parametrize("reward, raised", [(rr.exits, "SystemExit"), (rr.raises_base, "Stop")])
def test_in_process_exit_ends_the_run_with_an_error_naming_the_reward(reward, raised):
    runner = RewardRunner([reward], workers=0)
    with pytest.raises(runner_module.RewardCrashed, match=rf"reward '{reward.__name__}' raised {raised}") as e:
        runner(["p"], ["a"])
    assert isinstance(e.value, RewardFailure)


def test_in_process_keyboard_interrupt_stays_an_interrupt_and_names_the_reward():
    runner = RewardRunner([rr.interrupts], workers=0)
    with pytest.raises(KeyboardInterrupt) as e:
        runner(["p"], ["a"])
    assert any("'interrupts'" in note for note in getattr(e.value, "__notes__", []))


def test_exit_in_a_worker_is_a_counted_failure():
    with RewardRunner([rr.exits], workers=1) as runner:
        batch = runner(["p"] * 2, ["a", "b"])
    assert batch.failed.all() and batch.metrics["reward/exits/failures/exception"] == 2.0


def test_in_process_hang_is_cut_at_timeout_s():
    runner = RewardRunner([{"name": "_runner_rewards:flaky", "timeout_s": 0.5, "in_process": True}], workers=2)
    start = time.monotonic()
    batch = runner(["p"] * 3, ["ok", "hang", "ok"])
    assert time.monotonic() - start < 5.0
    # the whole chunk timed out, then each sample was retried alone: only the culprit fails
    assert batch.failed[:, 0].tolist() == [False, True, False]
    assert batch.metrics["reward/flaky/failures/timeout"] == 1.0 and batch.metrics["reward/flaky/failures"] == 1.0


def test_in_process_timeout_survives_a_reward_that_cancels_its_own_alarm():
    # math-verify sets signal.alarm and cancels it with alarm(0); that must not cancel the runner's limit
    runner = RewardRunner([{"name": "_runner_rewards:alarm_then_hang", "timeout_s": 0.5}], workers=0)
    start = time.monotonic()
    batch = runner(["p"], ["hang"])
    assert time.monotonic() - start < 5.0 and batch.metrics["reward/alarm_then_hang/failures/timeout"] == 1.0


@pytest.mark.parametrize("name", ["spins", "flaky"])  # a Python loop; a 60 s sleep
def test_in_process_reward_off_the_main_thread_has_its_limit_too(name):
    """The thread executor scores in its generator thread: a hanging in-process reward there used to hang the
    run (no signal handler off the main thread). Now only the culprit times out, within about 4 x timeout_s."""
    runner = RewardRunner([{"name": f"_runner_rewards:{name}", "timeout_s": 0.5}, rr.length_reward], workers=0)
    out = {}
    start = time.monotonic()
    t = threading.Thread(target=lambda: out.update(batch=runner(["p"] * 3, ["ok", "hang", "ok"])), daemon=True)
    t.start()
    t.join(30)
    assert not t.is_alive() and time.monotonic() - start < 4.5
    batch = out["batch"]
    assert batch.failed[:, 0].tolist() == [False, True, False] and batch.rewards[:, 1].tolist() == [2.0, 4.0, 2.0]
    assert batch.metrics[f"reward/{name}/failures/timeout"] == 1.0
    again = {}  # no CallTimeout is left pending in the thread for later code
    t = threading.Thread(target=lambda: again.update(batch=runner(["p"], ["ok"])), daemon=True)
    t.start()
    t.join(30)
    assert again["batch"].rewards.tolist() == [[1.0, 2.0]]


# ---------------------------------------------------------------- 3. one hanging sample fails only itself
def test_one_hanging_sample_in_a_worker_fails_only_itself():
    runner = RewardRunner([{"name": "_runner_rewards:flaky", "timeout_s": 1.0}], workers=1, chunk_size=4)
    with runner:
        batch = runner(["p"] * 4, ["ok", "hang", "ok", "ok"])
    assert batch.failed[:, 0].tolist() == [False, True, False, False]
    assert batch.rewards[:, 0].tolist() == [1.0, 0.0, 1.0, 1.0]
    assert batch.metrics["reward/flaky/failures/timeout"] == 1.0 and batch.metrics["reward/flaky/failures"] == 1.0


def test_one_crashing_sample_in_a_worker_fails_only_itself():
    with RewardRunner([rr.flaky], workers=1, chunk_size=4) as runner:
        batch = runner(["p"] * 4, ["ok", "ok", "die", "ok"])
    assert batch.failed[:, 0].tolist() == [False, False, True, False]
    assert batch.metrics["reward/flaky/failures/exception"] == 1.0


def test_re_scoring_a_reward_that_hangs_everywhere_stops_at_its_budget():
    calls = []

    def hangs(prompts, completions, **_):  # a closure: runs in-process
        calls.append(len(completions))
        time.sleep(60)

    spec = RewardSpec(name="hangs", timeout_s=0.2)
    batch = RewardRunner([(hangs, spec)], workers=0)(["p"] * 10, ["c"] * 10)
    # the chunk call, then single samples until 2 x 0.2 s had passed, not one timeout per sample
    assert calls[0] == 10 and 1 <= len(calls) - 1 <= 3
    assert batch.failed.all() and batch.metrics["reward/hangs/failures/timeout"] == 10.0


def test_worker_re_scoring_stops_at_its_budget():
    with RewardRunner([{"name": "_runner_rewards:flaky", "timeout_s": 0.5}], workers=1, chunk_size=6) as runner:
        batch = runner(["p"] * 6, ["hang"] * 6)
        # one kill for the chunk, then one per single sample started within 2 x 0.5 s (not 6)
        assert 2 <= runner._pool.restarts <= 4
    assert batch.failed.all() and batch.metrics["reward/flaky/failures/timeout"] == 6.0


# ---------------------------------------------------------------- 4. child processes die with their worker
def test_close_kills_processes_a_reward_started(tmp_path):
    pid_file = tmp_path / "pids"
    runner = RewardRunner([rr.spawn_sleeper], workers=1)
    batch = runner(["p"], ["ok"], pid_file=[str(pid_file)])
    assert not batch.failed.any()
    (pid,) = _pids(pid_file)
    assert _alive(pid)
    runner.close()
    assert _dead_soon(pid), "the reward's `sleep 1000` outlived RewardRunner.close()"


def test_timeout_kills_the_hung_reward_and_its_children(tmp_path):
    pid_file = tmp_path / "pids"
    with RewardRunner([{"name": "_runner_rewards:spawn_sleeper", "timeout_s": 1.0}], workers=1) as runner:
        batch = runner(["p"], ["hang"], pid_file=[str(pid_file)])
        assert batch.failed.all()
        (pid,) = _pids(pid_file)
        assert _dead_soon(pid), "the hung reward's `sleep 1000` outlived the killed worker"


def test_interpreter_exit_leaves_no_reward_children(tmp_path):
    pid_file = tmp_path / "pids"
    proc = _run_script(tmp_path, (
        "from covey.rewards import RewardRunner\n"
        "runner = RewardRunner([{'name': '_runner_rewards:spawn_sleeper'}], workers=1)\n"
        f"print(runner(['p'], ['ok'], pid_file=[{str(pid_file)!r}]).rewards.tolist())\n"
        "# no close(): interpreter exit must clean up\n"
    ))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[[1.0]]"
    (pid,) = _pids(pid_file)
    assert _dead_soon(pid), "the reward's `sleep 1000` outlived the interpreter"


# ---------------------------------------------------------------- 5. wrong-length returns are bugs
@pytest.mark.parametrize("workers", [0, 1])
def test_wrong_length_return_raises_naming_the_reward(workers):
    with RewardRunner([rr.wrong_length], workers=workers) as runner:
        match = "reward 'wrong_length' returned 3 scores for 2 completions"
        with pytest.raises(runner_module.RewardReturnError, match=match):
            runner(["p"] * 2, ["a", "b"])


def test_non_number_entries_stay_counted_fallbacks():
    batch = RewardRunner([rr.bad_entries], workers=0)(["p"] * 3, ["a", "b", "c"])
    assert batch.failed[:, 0].tolist() == [False, True, False] and batch.missing[:, 0].tolist() == [False, False, True]
    m = batch.metrics
    assert (m["reward/bad_entries/failures/exception"], m["reward/bad_entries/none"]) == (1.0, 1.0)


# ---------------------------------------------------------------- 6. TRL's conversational format and columns
def test_chat_prompts_give_assistant_message_completions():
    runner = RewardRunner([rr.message_length], workers=0)
    batch = runner([CHAT, CHAT], ["abc", "de"], group=[0, 0], completion_ids=[[1, 2], [3]], answer=["x", "y"])
    assert batch.rewards[:, 0].tolist() == [3.0, 2.0] and not batch.failed.any()


def test_plain_prompts_keep_plain_completions():
    runner = RewardRunner([rr.completion_kind], workers=0)
    batch = runner(["q", CHAT], ["a", "b"], answer=["1", "2"])  # completion_kind takes no `answer`
    assert batch.rewards[:, 0].tolist() == [1.0, 2.0] and not batch.failed.any()


def test_reward_without_kwargs_gets_only_its_columns():
    runner = RewardRunner([rr.id_count], workers=1)
    with runner:
        batch = runner(["q"] * 2, ["a", "b"], group=[0, 0], completion_ids=[[1, 2, 3], [4]], answer=["1", "2"])
    assert batch.rewards[:, 0].tolist() == [3.0, 1.0] and not batch.failed.any()


def test_missing_required_column_is_named():
    runner = RewardRunner([rr.echo_column], workers=0)
    with pytest.raises(ValueError, match=r"reward 'echo_column' needs column\(s\) \['score'\].*answer"):
        runner(["p"], ["a"], answer=["1"])


def test_builtin_rewards_score_chat_and_plain_prompts_alike():
    specs = [
        {"name": "format", "params": {"tags": ["answer"], "strict": False}},
        {"name": "length", "params": {"target": 3, "alpha": 1.0, "unit": "words"}},
        {"name": "length", "alias": "token_length", "params": {"target": 2, "alpha": 1.0}},
        {"name": "overlong", "params": {"max_len": 4, "buffer_len": 2}},
        {"name": "bleu"},
        {"name": "majority_vote"},
        {"name": "math"},
        {"name": "boxed_format"},
    ]
    completions = ["so <answer>4</answer> \\boxed{4}", "the answer is \\boxed{5}", "<answer>4</answer>", "7"]
    cols = dict(group=[0, 0, 1, 1], completion_ids=[[1], [1, 2], [1, 2, 3], [1, 2, 3, 4]],
                answer=["4", "4", "7", "7"], references=["answer is 4", "answer is 4", "7", "7"])
    runner = RewardRunner(specs, workers=0)
    plain = runner(["q"] * 4, completions, **cols)
    chat = runner([CHAT] * 4, completions, **cols)
    assert not plain.failed.any() and not chat.failed.any()
    assert plain.rewards.tolist() == chat.rewards.tolist()
    assert plain.rewards[:, 0].tolist() == [1.0, 0.0, 1.0, 0.0]  # format: has <answer>...</answer>
    assert plain.rewards[:, 6].tolist() == [1.0, 0.0, 0.0, 1.0]  # math against `answer`


def test_task_verifiers_score_chat_and_plain_prompts_alike():
    from covey.tasks.arithmetic import Arithmetic
    from covey.tasks.countdown import Countdown

    arith = Arithmetic(digits=1, operands=2, ops="+", n_train=0, n_test=2, chat=True)
    count = Countdown(n_train=0, n_test=2, chat=True)
    for task in (arith, count):
        items = task.examples("test")
        runner = RewardRunner([(task.reward, RewardSpec(name="accuracy"))], workers=0)
        cols = {k: [it[k] for it in items] for k in items[0] if k not in ("prompt", "id")}
        completions = ["no idea", "no idea"]
        chat = runner([it["prompt"] for it in items], completions, **cols)
        plain = runner(["q"] * 2, completions, **cols)
        assert isinstance(items[0]["prompt"], list)
        assert chat.rewards.tolist() == plain.rewards.tolist() == [[0.0], [0.0]] and not chat.failed.any()
    item = arith.examples("test")[0]
    good = RewardRunner([(arith.reward, RewardSpec(name="accuracy"))], workers=0)(
        [item["prompt"]], [f"= {item['answer']}"], answer=[item["answer"]])
    assert good.rewards.tolist() == [[1.0]]


# ---------------------------------------------------------------- 7. closures and rewards from __main__
def test_closure_runs_in_process_even_with_workers():
    bonus = 2.0

    def closure(prompts, completions, **_):
        return [bonus * len(c) for c in completions]

    with RewardRunner([closure, rr.length_reward], workers=2) as runner:
        batch = runner(["p"] * 2, ["a", "bb"])
        assert [e.in_process for e in runner.entries] == [True, False]
    assert batch.rewards.tolist() == [[2.0, 1.0], [4.0, 2.0]]


def test_reward_defined_in_main_runs_in_process(monkeypatch):
    def main_reward(prompts, completions, **_):
        return [1.0] * len(completions)

    main_reward.__module__, main_reward.__qualname__ = "__main__", "main_reward"
    monkeypatch.setattr(sys.modules["__main__"], "main_reward", main_reward, raising=False)
    runner = RewardRunner([main_reward], workers=2)
    assert runner.entries[0].in_process
    assert runner(["p"], ["a"]).rewards.tolist() == [[1.0]]


def test_unguarded_script_is_not_re_executed_by_workers(tmp_path):
    marker = tmp_path / "marker"
    proc = _run_script(tmp_path, (
        "import os\n"
        f"open({str(marker)!r}, 'a').write(f'{{os.getpid()}}\\n')\n"
        "from covey.rewards import RewardRunner\n"
        "def script_reward(prompts, completions, **_):\n"
        "    return [float(len(c)) for c in completions]\n"
        "scale = 3.0\n"
        "def make():\n"
        "    def closure(prompts, completions, **_):\n"
        "        return [scale] * len(completions)\n"
        "    return closure\n"
        "runner = RewardRunner([script_reward, make(), {'name': '_runner_rewards:length_reward', 'alias': 'w'}],\n"
        "                      workers=2)\n"
        "batch = runner(['p'] * 4, ['a', 'bb', 'ccc', 'dddd'])\n"
        "print(batch.rewards.tolist(), [e.in_process for e in runner.entries], runner._pool is not None)\n"
    ))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == (
        "[[1.0, 3.0, 1.0], [2.0, 3.0, 2.0], [3.0, 3.0, 3.0], [4.0, 3.0, 4.0]] [True, True, False] True"
    )
    assert len(marker.read_text().split()) == 1, "a reward worker re-executed the user's script"
