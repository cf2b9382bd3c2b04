"""UI-S1's semi-online text GUI: the step score, the patch module, the patched history in per_step episodes,
and the ui_s1 advantage on what the episodes record (MobileAgent f7702e4)."""

from pathlib import Path

import pytest

from covey.algos import ADVANTAGES
from covey.envs import ENVS, Action
from covey.envs.gui_sim import action_text, parse_action, step_score
from covey.models.chat import render
from covey.models.tiny import build_tiny_tokenizer
from covey.strategies import STRATEGIES
from covey.tasks.gui_sim import GuiSimTask
from tests.strategies.test_episodes import ScriptedEngine, context
from tests._cli import train_example

EXAMPLE = Path(__file__).parents[2] / "examples" / "agents" / "gui_ui_s1.yaml"
STEP = {"screen": "App: Home\n- app Settings", "action": "click", "arg": "Wi-Fi", "thought": "t"}


def test_step_score_follows_ui_s1s_table():
    cases = {
        "<think>go</think><action>click(wi-fi)</action>": (0.1 + 0.9 * 1.0, True),  # exact (case ignored)
        "<action>click(Wi-Fi)</action>": (0.9, True),  # no thought: no format point
        "<think> </think><action>click(Wi-Fi)</action>": (0.9, True),  # an empty thought is no thought
        "<think>go</think><action>click(Bluetooth)</action>": (0.1 + 0.9 * 0.5, False),  # right type only
        "<think>go</think><action>type(Wi-Fi)</action>": (0.1 + 0.9 * 0.1, False),  # parsed, other type
        "<think>go</think><action>fly(Wi-Fi)</action>": (0.1, False),  # not an action: nothing parsed
        "<think>go</think> click(Wi-Fi)": (0.1, False),  # no <action> tag
        "": (0.0, False),
    }
    for text, (score, exact) in cases.items():
        got = step_score(text, STEP)
        assert got[0] == pytest.approx(score) and got[1] is exact, text
    assert parse_action("<action>a</action><action>scroll( down )</action>") == ("scroll", "down")  # the last tag


def test_a_mismatch_is_patched_with_the_experts_turn_until_the_threshold():
    item = GuiSimTask(n_train=1, seed=3).examples()[0]
    steps = item["steps"]
    env = ENVS.build("gui_sim", {"patch_threshold": 2})
    first = env.reset(item, seed=0)
    assert steps[0]["screen"] in first.messages[-1]["content"] and first.anchor == 0
    wrong = Action("<think>hm</think><action>back()</action>", [])
    r1 = env.step(wrong)  # patch 1
    assert r1.info == {"valid": False, "match": False, "replace_action": action_text(steps[0])}
    assert steps[1]["screen"] in r1.messages[0]["content"] and r1.anchor == 1 and not r1.done
    r2 = env.step(Action(action_text(steps[1]), []))  # the expert's own turn: matched, no patch
    assert r2.info == {"valid": True, "match": True} and r2.reward == pytest.approx(1.0)
    env.step(wrong)  # patch 2
    r4 = env.step(wrong)  # a third mismatch: past the threshold, the episode ends
    assert r4.terminated and r4.info["success"] is False and "replace_action" not in r4.info
    unlimited = ENVS.build("gui_sim", {"patch_threshold": -1})
    unlimited.reset(item, seed=0)
    ends = [unlimited.step(wrong) for _ in steps]
    assert [e.terminated for e in ends] == [False] * (len(steps) - 1) + [True] and ends[-1].info["success"] is False
    perfect = ENVS.build("gui_sim", {})
    perfect.reset(item, seed=0)
    done = [perfect.step(Action(action_text(s), [])) for s in steps][-1]
    assert done.terminated and done.info["success"] is True
    with pytest.raises(ValueError, match="patch_threshold must be >= -1"):
        ENVS.build("gui_sim", {"patch_threshold": -2})


def test_per_step_episodes_keep_the_patched_turn_in_the_history_and_record_validity():
    tok = build_tiny_tokenizer()
    item = GuiSimTask(n_train=1, seed=3).examples()[0]
    steps = item["steps"]
    turns = ["<think>x</think><action>back()</action>", action_text(steps[1])]
    engine = ScriptedEngine(lambda p, k: (tok.encode(turns[k]), "stop"))
    strat = STRATEGIES.build("episodes", {"env": {"name": "gui_sim"}, "layout": "per_step", "max_turns": 2})
    batch, m = strat.rollout([item], context([item], engine, tok, group=1))
    # turn 1's prompt is the conversation with the EXPERT's first turn, not the model's
    env = ENVS.build("gui_sim", {})
    start = env.reset(item, seed=0).messages
    conv = [*start, {"role": "assistant", "content": action_text(steps[0])},
            {"role": "user", "content": f"Screen:\n{steps[1]['screen']}"}]  # fmt: skip
    assert engine.calls[1]["prompts"][0] == render(tok, conv, generation_prompt=True)
    assert batch.step_valid == [[False, True], [False, True]] and batch.step_rewards[0] == pytest.approx([0.1 + 0.9 * 0.1, 1.0])
    assert batch.items[0]["transcript"][2]["replaced_by"] == action_text(steps[0])
    adv = ADVANTAGES["ui_s1"].bind({})(batch)  # the semi-online estimator reads what the episodes recorded
    assert adv.metrics["adv/ui_s1/invalid_turn_frac"] == pytest.approx(0.5)
    # concat rows cannot rewrite history: the patched episode fails, the run goes on
    engine = ScriptedEngine(lambda p, k: (tok.encode(turns[k]), "stop"))
    concat = STRATEGIES.build("episodes", {"env": {"name": "gui_sim"}, "layout": "concat", "max_turns": 2})
    out, m = concat.rollout([item], context([item], engine, tok, group=1))
    assert len(out) == 0 and m["episodes/end/env_error"] == 1.0


def test_a_policy_without_the_experts_actions_never_succeeds():
    """The adversary: whatever it writes, without the expert's action it scores at most 0.55 a step and the
    episode ends after patch_threshold + 1 mismatches, unsuccessful."""
    item = GuiSimTask(n_train=1, seed=8).examples()[0]
    for text in ("<think>" + "x" * 500 + "</think><action>click(everything)</action>", action_text(item["steps"][0]) * 3):
        env = ENVS.build("gui_sim", {})
        env.reset(item, seed=0)
        results = [env.step(Action(text if k else "<think>t</think><action>done()</action>", [])) for k in range(3)]
        assert results[-1].terminated and results[-1].info["success"] is False
        assert all(r.reward <= 0.55 + 1e-9 for r in results[1:])


def test_task_items_demonstrations_and_the_single_turn_verifier():
    task = GuiSimTask(n_train=6, n_test=3, seed=1)
    train, test = task.examples("train"), task.examples("test")
    assert len(train) == 6 and len(test) == 3 and train == GuiSimTask(n_train=6, n_test=3, seed=1).examples("train")
    assert {x["prompt"] for x in train} != {x["prompt"] for x in test} or train[0]["steps"] != test[0]["steps"]
    for x in train:
        assert x["steps"][-1]["action"] == "done" and all(s["screen"].startswith("App: ") for s in x["steps"])
    demo = task.demonstration(train[0])
    assert task.reward(None, [demo, "nothing"], [train[0]["steps"]] * 2) == pytest.approx([1.0, 0.0])


@pytest.mark.slow  # one CLI run: 2 steps of the UI-S1 example with the tiny model
def test_covey_train_runs_the_gui_ui_s1_example_for_two_steps(tmp_path):
    steps = train_example("agents/gui_ui_s1.yaml", tmp_path / "run", 'sampling.max_new_tokens=8', 'rollout.strategy.max_turns=3')
    assert all("adv/ui_s1/invalid_turn_frac" in s for s in steps)