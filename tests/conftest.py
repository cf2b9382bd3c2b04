"""Tests run single-threaded: their small models gain little from a second thread, and on a shared,
oversubscribed CPU two OpenMP threads waiting on each other make small ops many times slower
(measured: the engine and model tests took 156 s with 2 threads, ~10 s with 1)."""

import os
from pathlib import Path

import pytest
import torch


@pytest.fixture(autouse=True)
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """On a non-root host without a usable bubblewrap (`make` installs it only as root), a test that
    fails because the code sandbox refuses to run (SandboxUnavailable) is reported as skipped, with
    the refusal as the reason; as root that stays a failure (the install is broken)."""
    outcome = yield
    report = outcome.get_result()
    if report.failed and call.excinfo is not None and os.geteuid() != 0:
        from covey.rewards.sandbox import SandboxUnavailable

        if call.excinfo.errisinstance(SandboxUnavailable):
            report.outcome = "skipped"
            report.longrepr = (str(item.path), item.location[1] or 0, f"Skipped: {call.excinfo.value}")


# Modules whose tests train, score or evaluate end to end (a Trainer, a `covey` subprocess, the code
# sandbox, reward workers): marked `integration`, so `make test-fast` (-m "not slow and not ray and not
# integration") leaves them to `make test`. Chosen by measured duration: each held over 1.5 s of tests
# that take more than a second each (docs/development.md, "Tests").
INTEGRATION = frozenset({
    "bench/test_trl.py", "engine/test_quantize.py", "engine/test_vllm_engine.py", "envs/test_env_concurrency.py",
    "envs/test_verifiers.py", "eval/test_eval_run_cli.py", "eval/test_eval_samples.py", "likelihood/test_diffusion_sft.py",
    "likelihood/test_presets_train.py", "preference/test_preference_train.py", "rewards/test_groupwise.py",
    "rewards/test_judge_examples.py", "rewards/test_judge_local.py", "rewards/test_judge_openai.py",
    "rewards/test_judge_policy.py", "rewards/test_runner.py", "rewards/test_runner_guards.py",
    "rewards/test_runner_reliability.py", "rewards/test_sandbox.py", "rewards/test_sandbox_program_process.py",
    "rewards/test_table_latex.py", "rewards/test_triton_exec.py", "runtime/test_data_parallel.py",
    "runtime/test_thread_trainer.py", "strategies/test_episodes.py", "tasks/test_dataset_cli.py", "test_api.py",
    "test_cli_errors.py", "test_examples.py", "test_methods_e2e.py", "train/test_export.py", "train/test_hooks_resume.py", "train/test_logging.py",
    "train/test_run_reliability.py", "train/test_sft.py", "train/test_trainer_e2e.py", "train/test_vlm_train.py",
})  # fmt: skip
TESTS = Path(__file__).parent


# The modules on the shared local Ray (fixture `local_ray`, tests/runtime/conftest.py): under
# pytest-xdist every test of theirs runs on one worker (`pytest_xdist_make_scheduler` below).
RAY_MODULES = frozenset({
    "runtime/test_ray_executor.py", "runtime/test_ray_learner.py", "runtime/test_ray_sharded.py",
    "runtime/test_scale_errors.py", "runtime/test_swarm.py", "runtime/test_weight_sync.py",
})  # fmt: skip


def pytest_collection_modifyitems(config, items):
    """Marks the INTEGRATION modules; a test on the shared local Ray outside RAY_MODULES is refused
    (it would start a second Ray on the other xdist worker)."""
    for item in items:
        path = item.path.relative_to(TESTS).as_posix()
        if path in INTEGRATION:
            item.add_marker(pytest.mark.integration)
        if "local_ray" in getattr(item, "fixturenames", ()) and path not in RAY_MODULES:
            raise pytest.UsageError(f"{item.nodeid} uses local_ray: add {path} to RAY_MODULES in tests/conftest.py")


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config, log):
    """`make test`'s xdist workers: all the tests of RAY_MODULES go to one worker, as one unit (they
    share its one local Ray instead of each worker starting its own on the same 2 cores, and their
    module fixtures run once), every other test to whichever worker is free. xdist's `--dist
    loadgroup` cannot do this under pytest 9.2: it groups by rewriting a test's node id, which pytest
    9.2 no longer reads, so its groups were silently ignored."""
    if config.getvalue("dist") not in ("load", "loadgroup"):
        return None  # another --dist asked for by hand: xdist's own
    from xdist.scheduler import LoadScopeScheduling

    class RayOnOneWorker(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return "ray" if nodeid.split("::", 1)[0].removeprefix("tests/") in RAY_MODULES else nodeid

    return RayOnOneWorker(config, log)


TOY_REWARDS = '''
def digit_fraction(prompts, completions, **columns):
    """Dense toy reward: the fraction of completion characters that are digits (chat prompts give
    TRL's [{"role": "assistant", "content": ...}] completions)."""
    texts = [c if isinstance(c, str) else c[0]["content"] for c in completions]
    return [sum(ch.isdigit() for ch in t) / max(len(t), 1) for t in texts]
'''


@pytest.fixture
def toy_reward_module(tmp_path, monkeypatch):
    (tmp_path / "toy_rewards.py").write_text(TOY_REWARDS)
    monkeypatch.syspath_prepend(str(tmp_path))
    return "toy_rewards:digit_fraction"
