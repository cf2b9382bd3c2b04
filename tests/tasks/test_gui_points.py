"""gui_points: seeded screens of non-overlapping boxes, the first-point verifier, the warm-start demonstration."""

import doctest

import pytest

import covey.tasks.gui_points as mod
from covey.rewards import get_reward
from covey.tasks import get_task

COLS = ("x1", "y1", "x2", "y2")


def cols(items):
    return {k: [it[k] for it in items] for k in COLS}


def test_items_are_seeded_disjoint_and_well_formed():
    task = get_task("gui_points", n_train=200, n_test=50, chat=False)
    train, test = task.examples("train"), task.examples("test")
    assert len(train) == 200 and len(test) == 50
    again = get_task("gui_points", n_train=10, n_test=50, chat=False)
    assert again.examples("test") == test  # test does not depend on n_train
    key = lambda it: (tuple(sorted((k, tuple(v)) for k, v in it["elements"].items())), it["target"])  # noqa: E731
    assert not {key(it) for it in train} & {key(it) for it in test}
    for it in train + test:
        boxes = list(it["elements"].values())
        assert len(boxes) == 4 and it["elements"][it["target"]] == [it["x1"], it["y1"], it["x2"], it["y2"]]
        for i, (a, b, c, d) in enumerate(boxes):
            assert 0 <= a < c <= 99 and 0 <= b < d <= 99 and all(isinstance(v, int) for v in (a, b, c, d))
            for e, f, g, h in boxes[i + 1:]:  # no two boxes overlap or touch: a point names one element
                assert c < e or g < a or d < f or h < b
        assert f"Where is the {it['target']}?" in it["prompt"] and f"- {it['target']}: ({it['x1']}, " in it["prompt"]
        assert it["answer"] == f"{it['x1']},{it['y1']},{it['x2']},{it['y2']}"


def test_demonstrations_score_one_with_the_verifier_and_two_with_aer_gui():
    task = get_task("gui_points", n_train=0, n_test=30)
    items = task.examples("test")
    demos = [task.demonstration(it) for it in items]
    assert task.reward(None, demos, **cols(items)) == [1.0] * 30
    assert get_reward("aer_gui")(prompts=None, completions=demos, **cols(items)) == [2.0] * 30
    loose = get_task("gui_points", n_train=0, n_test=3, no_think=True)
    demo = loose.demonstration(loose.examples("test")[0])
    assert demo.startswith("[") and "<think>" not in loose.examples("test")[0]["prompt"][0]["content"]


def test_verifier_reads_the_first_point_only():
    task = get_task("gui_points", n_train=0, n_test=1)
    it = task.examples("test")[0]
    inside = [it["x2"], it["y2"]]  # a corner: edges count
    outside = [it["x2"] + 1, it["y1"]]
    texts = [f'<think>t</think>[{{"point_2d": {inside}}}, {{"point_2d": [0, 99]}}]',
             f'<think>t</think>[{{"point_2d": {outside}}}, {{"point_2d": {inside}}}]',
             f'[{{"point_2d": {inside}}}]']  # no think block: malformed
    assert task.reward(None, texts, **{k: [it[k]] * 3 for k in COLS}) == [1.0, 0.0, 0.0]


@pytest.mark.parametrize("params,match", [
    ({"elements": 9}, "elements"), ({"width": 10}, "width"), ({"n_test": -1}, "n_train"), ({"no_think": 1}, "no_think"),
])  # fmt: skip
def test_bad_params_fail(params, match):
    with pytest.raises(ValueError, match=match):
        get_task("gui_points", **params)


def test_eight_elements_fit_on_the_smallest_grid():
    items = get_task("gui_points", width=20, height=20, elements=8, n_train=0, n_test=20).examples("test")
    assert all(len(it["elements"]) == 8 and 0 <= it["x1"] < it["x2"] <= 19 for it in items)


def test_docstring_examples_hold():
    result = doctest.testmod(mod)
    assert result.attempted >= 3 and result.failed == 0


def test_the_example_trains_two_steps_with_aer_gui(tmp_path):
    import math
    from pathlib import Path

    from covey.train.config import load_config
    from covey.train.trainer import Trainer

    example = Path(__file__).parents[2] / "examples" / "tiny" / "aer_gui.yaml"
    cfg = load_config(example, [
        "steps=2", "rollout.prompts_per_step=2", "rollout.group_size=2", "sampling.max_new_tokens=8", "reward_workers=0",
        "log.progress=false", "log.tensorboard=false", f"log.dir={tmp_path}", "task.n_train=8", "task.n_test=2",
    ])  # fmt: skip
    assert cfg.task_reward_weight == 0.0 and [r.name for r in cfg.rewards] == ["aer_gui"]
    trainer = Trainer(cfg, tmp_path / "run")
    for _ in range(2):
        m = trainer.step()
        assert -1.0 <= m["reward/aer_gui/mean"] <= 2.0 and m["reward/aer_gui/failures"] == 0
        assert math.isfinite(m["learn/loss"]) and "reward/accuracy/mean" in m  # the verifier is logged, not trained on
    assert trainer.step_num == 2
