"""Tests run single-threaded: their small models gain little from a second thread, and on a shared,
oversubscribed CPU two OpenMP threads waiting on each other make small ops many times slower
(measured: the engine and model tests took 156 s with 2 threads, ~10 s with 1)."""

import os

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
