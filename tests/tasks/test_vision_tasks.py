"""The vision tasks (docs/vlm.md): seeded images, the verifier gives the demonstration full marks and a
wrong answer none, the prompts hold their images, bad parameters are refused."""

import pytest

from covey.models.vision import prompt_images
from covey.tasks import get_task

NAMES = ["gui_actions", "shapes_vqa", "video_grounding", "table_images"]


@pytest.mark.parametrize("name", NAMES)
def test_items_are_seeded_and_carry_their_images_in_the_prompt(name):
    a, b = get_task(name, n_train=3, n_test=2), get_task(name, n_train=3, n_test=2)
    for x, y in zip(a.examples("train"), b.examples("train")):
        ix, iy = prompt_images(x["prompt"]), prompt_images(y["prompt"])
        assert ix and [i.tobytes() for i in ix] == [i.tobytes() for i in iy]
        assert x["prompt"] is not None and {k: v for k, v in x.items() if k not in ("prompt", "image", "video")} == \
            {k: v for k, v in y.items() if k not in ("prompt", "image", "video")}  # fmt: skip
    other = get_task(name, n_train=3, n_test=2, seed=1).examples("train")
    assert [prompt_images(x["prompt"])[0].tobytes() for x in other] != [prompt_images(x["prompt"])[0].tobytes() for x in a.examples("train")]
    test_ids = {prompt_images(x["prompt"])[0].tobytes() for x in a.examples("test")}
    assert len(test_ids) == 2


@pytest.mark.parametrize("name", ["gui_actions", "shapes_vqa", "video_grounding"])
def test_the_verifier_passes_the_demonstration_and_fails_a_wrong_answer(name):
    task = get_task(name, n_train=0, n_test=16)
    items = task.examples("test")
    cols = {k: [it.get(k) for it in items] for k in items[0] if k not in ("id", "prompt")}
    good = task.reward([it["prompt"] for it in items], [task.demonstration(it) for it in items], **cols)
    assert good == [1.0] * len(items)
    wrong = {"gui_actions": "<think>x</think> <answer>[{'action': 'navigate_back', 'coordinate': [0, 0]}]</answer>",
             "shapes_vqa": "<think>x</think><answer>A B</answer>", "video_grounding": "<answer> 90 to 99 </answer>"}[name]  # fmt: skip
    bad = task.reward([it["prompt"] for it in items], [wrong] * len(items), **cols)
    assert sum(bad) <= sum(it.get("action") == "navigate_back" for it in items)  # only the items that asked for it


def test_gui_actions_solution_is_ui_r1s_and_clicks_have_boxes():
    items = get_task("gui_actions", n_train=40, n_test=0).examples()
    clicks = [it for it in items if it["action"] == "click"]
    assert clicks and all(it["solution"] == f"<answer>[{{'action': 'click' ,'coordinate': {[it['x1'], it['y1'], it['x2'], it['y2']]} }}]</answer>"
                          for it in clicks)  # fmt: skip
    others = [it for it in items if it["action"] != "click"]
    assert others and all(it["x1"] is None and "[0,0,0,0]" in it["solution"] for it in others)
    assert {it["action"] for it in items} <= {"click", "open_app", "scroll", "navigate_back", "input_text"}


def test_video_grounding_spans_cover_the_visible_frames():
    item = get_task("video_grounding", n_train=0, n_test=1, frames=8, fps=2.0).examples("test")[0]
    frames, times = item["video"]["frames"], item["video"]["timestamps"]
    assert times == [k / 2 for k in range(8)]
    visible = [t for f, t in zip(frames, times) if len(set(f.getdata())) > 1]  # a square is drawn
    assert (item["start"], item["end"]) == (visible[0], visible[-1] + 0.5)
    assert item["answer"] == f"<answer> {item['start']:.1f} to {item['end']:.1f} </answer>"


@pytest.mark.parametrize("name, params, match", [
    ("gui_actions", {"width": 100}, "multiples of 28"), ("gui_actions", {"buttons": 8}, "do not fit"),
    ("shapes_vqa", {"size": 30}, "multiple of 28"), ("video_grounding", {"frames": 2}, "4..32"),
    ("gui_points", {"images": True}, "multiples of 28"), ("gui_points", {"images": True, "width": 112, "height": 112, "chat": False}, "chat"),
])  # fmt: skip
def test_bad_parameters_are_refused(name, params, match):
    with pytest.raises(ValueError, match=match):
        get_task(name, **params)


def test_gui_points_with_images_names_only_the_target():
    item = get_task("gui_points", images=True, width=112, height=112, n_train=0, n_test=1).examples("test")[0]
    text = item["prompt"][0]["content"][-1]["text"]
    assert item["target"] in text and "(x1, y1, x2, y2)" not in text and item["image"].size == (112, 112)


@pytest.mark.parametrize("name", [*NAMES, "countdown", "gui_points"])
def test_negative_split_sizes_are_refused_and_one_split_s_size_leaves_the_other_s_items(name):
    for bad in ({"n_train": -1}, {"n_test": -1}):
        with pytest.raises(ValueError, match=r"n_train and n_test must be >= 0"):
            get_task(name, **bad)
    if name in NAMES:  # seeded_splits: each split has its own generator, so the test split's size leaves train's items
        def train(n_test):
            return [i.tobytes() for x in get_task(name, n_train=2, n_test=n_test).examples("train") for i in prompt_images(x["prompt"])]

        assert train(1) == train(3)
