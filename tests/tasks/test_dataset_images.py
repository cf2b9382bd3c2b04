"""Images in the `dataset` task (covey.tasks._images): the columns TRL reads, placeholders, video frames,
and bad input as one-line errors naming the row and the file."""

import json

import pytest
from PIL import Image

from covey.models.vision import prompt_images
from covey.tasks.dataset import DatasetTask


def _png(path, color=(255, 0, 0), size=(28, 28)):
    Image.new("RGB", size, color).save(path)
    return path


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_a_jsonl_of_relative_paths_is_read_from_the_data_files_folder(tmp_path, monkeypatch):
    (tmp_path / "img").mkdir()
    _png(tmp_path / "img" / "a.png")
    data = _jsonl(tmp_path / "train.jsonl", [{"prompt": "What color?", "image": "img/a.png", "label": "red"}])
    monkeypatch.chdir("/")
    item = DatasetTask(path=data).examples()[0]
    # a string prompt with an image becomes a user message, the image before the text (TRL's order)
    assert item["prompt"] == [{"role": "user", "content": [{"type": "image", "image": str(tmp_path / "img" / "a.png")},
                                                           {"type": "text", "text": "What color?"}]}]  # fmt: skip
    assert item["image"] == "img/a.png" and item["label"] == "red"  # the reward columns keep what the row holds


def test_a_datasets_image_column_and_in_memory_pil_and_bytes(tmp_path):
    import datasets

    img = Image.new("RGB", (30, 20), (0, 0, 255))
    ds = datasets.Dataset.from_dict({"prompt": ["q1", "q2"], "image": [img, img]}).cast_column("image", datasets.Image())
    ds.save_to_disk(str(tmp_path / "ds"))
    for task in (DatasetTask(rows=ds), DatasetTask(path=tmp_path / "ds")):
        (src,) = prompt_images(task.examples()[1]["prompt"])
        assert isinstance(src, Image.Image) and src.size == (30, 20) and src.convert("RGB").getpixel((0, 0)) == (0, 0, 255)
    raw = (_png(tmp_path / "b.png", (1, 2, 3))).read_bytes()
    rows = [{"prompt": [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}], "images": [raw, raw]}]
    item = DatasetTask(rows=rows).examples()[0]
    assert [p["type"] for p in item["prompt"][1]["content"]] == ["image", "image", "text"] and prompt_images(item["prompt"]) == [raw, raw]
    assert item["prompt"][0] == {"role": "system", "content": "s"}


def test_placeholders_are_filled_in_order_and_must_match_the_images(tmp_path):
    a, b = str(_png(tmp_path / "a.png")), str(_png(tmp_path / "b.png", (0, 255, 0)))
    prompt = [{"role": "user", "content": [{"type": "text", "text": "first"}, {"type": "image"}, {"type": "text", "text": "then"},
                                           {"type": "image", "text": None}]}]  # fmt: skip
    item = DatasetTask(rows=[{"prompt": prompt, "images": [a, b]}]).examples()[0]
    assert [p.get("image") for p in item["prompt"][0]["content"]] == [None, a, None, b]
    with pytest.raises(ValueError, match=r"rows\[0\]: the prompt has 2 image placeholder\(s\) but the row has 1 image"):
        DatasetTask(rows=[{"prompt": prompt, "images": [a]}])


def test_video_frames_become_timestamped_image_parts(tmp_path):
    frames = [str(_png(tmp_path / f"f{i}.png", (i * 40, 0, 0))) for i in range(3)]
    item = DatasetTask(rows=[{"prompt": "When?", "video": {"frames": frames, "timestamps": [0, 0.5, 1.25]}}]).examples()[0]
    parts = item["prompt"][0]["content"]
    assert [p.get("text") for p in parts[0:6:2]] == ["Frame at 0.00s:", "Frame at 0.50s:", "Frame at 1.25s:"]
    assert [p["image"] for p in parts[1:6:2]] == frames and parts[-1] == {"type": "text", "text": "When?"}
    for bad, match in (({"frames": frames, "timestamps": [0, 1]}, "one time in seconds per frame"),
                       ({"frames": frames, "timestamps": [0, 2, 1]}, "non-decreasing"),
                       ({"frames": [], "timestamps": []}, "must be"),
                       ({"frames": frames, "timestamps": [0, float("nan"), 1]}, "finite")):  # fmt: skip
        with pytest.raises(ValueError, match=match):
            DatasetTask(rows=[{"prompt": "x", "video": bad}])


def test_a_missing_image_names_the_file_and_line(tmp_path):
    _png(tmp_path / "ok.png")
    data = _jsonl(tmp_path / "d.jsonl", [{"prompt": "x", "image": "ok.png"}, {"prompt": "y", "image": "gone.png"}])
    with pytest.raises(ValueError, match=r"d\.jsonl:2: image file '.*gone\.png' does not exist"):
        DatasetTask(path=data)


def test_a_corrupt_image_names_the_file_and_line(tmp_path):
    (tmp_path / "bad.png").write_bytes(b"\x89PNG\r\n\x1a\n not really")
    data = _jsonl(tmp_path / "d.jsonl", [{"prompt": "y", "image": "bad.png"}])
    with pytest.raises(ValueError, match=r"d\.jsonl:1: image '.*bad\.png' cannot be read"):
        DatasetTask(path=data)


def test_an_image_column_of_mixed_kinds_is_refused(tmp_path):
    p = _png(tmp_path / "a.png")
    rows = [{"prompt": "x", "image": str(p)}, {"prompt": "y", "image": p.read_bytes()}]
    with pytest.raises(ValueError, match=r"rows\[1\]: column 'image' holds bytes but rows\[0\] holds a path"):
        DatasetTask(rows=rows)
    with pytest.raises(ValueError, match=r"rows\[0\]: column 'images' holds type int"):
        DatasetTask(rows=[{"prompt": "x", "images": [str(p), 3]}])
    with pytest.raises(ValueError, match="column 'images' must be a list"):
        DatasetTask(rows=[{"prompt": "x", "images": str(p)}])


def test_rows_without_images_stay_text_and_a_bad_content_part_is_refused(tmp_path):
    task = DatasetTask(rows=[{"prompt": "plain"}, {"prompt": "pic", "image": str(_png(tmp_path / "a.png"))}])
    assert task.examples()[0]["prompt"] == "plain" and prompt_images(task.examples()[1]["prompt"])
    with pytest.raises(ValueError, match="message 0 of 'prompt' must be"):
        DatasetTask(rows=[{"prompt": [{"role": "user", "content": [{"type": "audio"}]}]}])
