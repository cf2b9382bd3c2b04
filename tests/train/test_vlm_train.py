"""The tiny vision-language model trains end to end (docs/vlm.md): from a YAML over a JSONL of image
paths, from a `datasets` Image column, every examples/vlm recipe, TRL's VLM script with only its import
changed; the vision tower stays frozen; bad image data is one `error:` line, exit 2."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from covey.models.vision import vision_parameters
from covey.train.config import ConfigError, load_config
from covey.train.setup import check_run, load_policy
from covey.train.trainer import Trainer

ROOT = Path(__file__).resolve().parents[2]
VLM = ROOT / "examples" / "vlm"
QUIET = ["reward_workers=0", "log.progress=false", "log.tensorboard=false"]


def _weights(model):
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def _train(cfg, run_dir, steps=2):
    trainer = Trainer(cfg, run_dir)
    try:
        before = _weights(trainer.model)
        metrics = [trainer.step() for _ in range(steps)]
        return trainer, before, metrics
    finally:
        trainer.close()


def test_two_steps_from_the_yaml_over_a_jsonl_of_image_paths_keep_the_vision_tower_frozen(tmp_path):
    cfg = load_config(VLM / "colors.yaml", [f"task.params.path={VLM / 'colors' / 'train.jsonl'}",
                                            f"rewards=[{{name: '{VLM / 'colors' / 'reward.py'}:names_the_color'}}]",
                                            f"log.dir={tmp_path}", "optim.lr=1e-2", *QUIET])  # fmt: skip
    trainer, before, metrics = _train(cfg, tmp_path / "run")
    after = _weights(trainer.model)
    assert len(metrics) == 2 and all(torch.isfinite(torch.tensor(m["learn/loss"])) for m in metrics)
    vision = {f"model.{n}" for n, _ in vision_parameters(trainer.model)}
    assert vision and all(torch.equal(before[n], after[n]) for n in vision)  # frozen (model.freeze_vision)
    changed = [n for n in after if n not in vision and not torch.equal(before[n], after[n])]
    assert any("language_model" in n for n in changed) or metrics[0]["learn/grad_norm"] == 0.0
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2] and "reward/names_the_color/mean" in rows[0]


def test_a_datasets_image_column_through_the_python_api(tmp_path):
    from datasets import Dataset, Image
    from PIL import Image as PILImage

    from covey import GRPOTrainer

    rows = [{"prompt": [{"role": "user", "content": "Colour?"}], "image": PILImage.new("RGB", (28 * (1 + i % 2), 28), c),
             "color": name} for i, (name, c) in enumerate([("red", (255, 0, 0)), ("blue", (0, 0, 255))] * 2)]  # fmt: skip
    seen = []

    def red(completions, image, color, **_):  # images reach rewards as keyword arguments
        seen.extend(type(x).__name__ for x in image)
        return [float("red" in (c[0]["content"] if not isinstance(c, str) else c)) for c in completions]

    config = {"model": {"name": "tiny-qwen2-vl", "dtype": "fp32", "lora": {"r": 4, "alpha": 8}}, "steps": 2,
              "rollout": {"prompts_per_step": 2, "group_size": 2}, "sampling": {"max_new_tokens": 4}, "reward_workers": 0,
              "log": {"progress": False, "tensorboard": False}, "algo": {"preset": "grpo"}}  # fmt: skip
    ds = Dataset.from_list(rows).cast_column("image", Image())
    with GRPOTrainer(reward_funcs=[red], train_dataset=ds, config=config, run_dir=tmp_path / "r") as trainer:
        assert trainer.config.model.family == "vision_language"  # read from the model's config
        trainer.step()
        trainer.step()
        trained = [n for n, p in trainer.model.named_parameters() if p.requires_grad]
    assert seen and set(seen) <= {"PngImageFile", "Image"}
    assert trained and all("lora_" in n and "language_model" in n for n in trained)  # adapters on the language tower only


@pytest.mark.parametrize("recipe", ["gui_actions", "gui_points", "shapes_vqa", "table_images", "video_grounding"])
def test_every_vlm_recipe_trains_a_step(tmp_path, recipe):
    cfg = load_config(VLM / f"{recipe}.yaml", [f"log.dir={tmp_path}", "steps=1", *QUIET])
    _, _, metrics = _train(cfg, tmp_path / "run", steps=1)
    assert metrics[0]["length/mean"] > 0 and "learn/loss" in metrics[0]


def test_freeze_vision_false_trains_the_vision_tower(tmp_path):
    cfg = load_config(None, ["model.name=tiny-qwen2-vl", "model.family=vision_language", "model.freeze_vision=false"])
    model, _ = load_policy(cfg.model)
    assert all(p.requires_grad for _, p in vision_parameters(model))
    cfg = load_config(None, ["model.name=tiny-qwen2-vl", "model.family=vision_language"])
    model, _ = load_policy(cfg.model)
    assert not any(p.requires_grad for _, p in vision_parameters(model))


@pytest.mark.slow  # a subprocess that builds, saves and loads a model: ~20 s on a loaded 2-core machine
def test_the_trl_vlm_script_runs_with_only_its_import_changed(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT / "src")}
    out = subprocess.run([sys.executable, str(ROOT / "examples" / "trl_vlm_script.py")], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=600)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    row = json.loads((tmp_path / "runs" / "trl-vlm-script" / "metrics.jsonl").read_text().splitlines()[0])
    assert "reward/think_format_reward/mean" in row and "reward/accuracy_reward/mean" in row
    saved = tmp_path / "runs" / "trl-vlm-script"
    assert (saved / "processor_config.json").is_file() and (saved / "model.safetensors").is_file()


# ------------------------------------------------------------------ bad input: refused before a model loads
def _config(tmp_path, rows, *overrides):
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return load_config(None, ["model.name=tiny-qwen2-vl", "model.family=vision_language", "task.name=dataset",
                              f"task.params={{path: {data}, verifier: none}}", "rewards=[{name: length}]",
                              f"log.dir={tmp_path}", *overrides])  # fmt: skip


TEXT_ENGINE = """
class TextEngine:  # an engine that declares no caps: text prompts only
    pad_token_id = 0
    version = 0

    def __init__(self, model, tokenizer):
        pass

    def generate(self, prompts, n, sampling):
        raise NotImplementedError

    def load_weights(self, source, version=None):
        pass

    def close(self):
        pass
"""


def test_bad_image_data_and_a_text_model_are_refused_when_the_run_is_checked(tmp_path):
    ok = str(VLM / "colors" / "red_square.png")
    with pytest.raises(ValueError, match=r"d\.jsonl:2: image file '.*missing\.png' does not exist"):
        check_run(_config(tmp_path, [{"prompt": "a", "image": ok}, {"prompt": "b", "image": "missing.png"}]))
    (tmp_path / "junk.png").write_bytes(b"junk")
    with pytest.raises(ValueError, match=r"d\.jsonl:1: image '.*junk\.png' cannot be read"):
        check_run(_config(tmp_path, [{"prompt": "a", "image": str(tmp_path / "junk.png")}]))
    with pytest.raises(ValueError, match="column 'image' holds type int"):
        check_run(_config(tmp_path, [{"prompt": "a", "image": ok}, {"prompt": "b", "image": 7}]))
    cfg = _config(tmp_path, [{"prompt": "a", "image": ok}], "model.name=tiny-llama", "model.family=causal")
    with pytest.raises(ValueError, match="has images in its prompts .* text-only model"):
        check_run(cfg)
    with pytest.raises(ConfigError, match="is a vision-language model: set model.family: vision_language"):
        _config(tmp_path, [{"prompt": "a"}], "model.family=causal")
    (tmp_path / "text_engine.py").write_text(TEXT_ENGINE)
    with pytest.raises(ConfigError, match="needs an engine that takes images .* engine '.*text_engine.py:TextEngine' does not"):
        _config(tmp_path, [{"prompt": "a"}], f"engine={{name: {tmp_path / 'text_engine.py'}:TextEngine}}")
    with pytest.raises(ConfigError, match="tree forking of the engine"):
        _config(tmp_path, [{"prompt": "a"}], "rollout.strategy=treepo")
    with pytest.raises(ConfigError, match="runtime.executor inline or thread"):
        _config(tmp_path, [{"prompt": "a"}], "runtime.executor=ray")


def test_a_missing_image_is_one_error_line_and_exit_2(tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"prompt": "a", "image": "nope.png"}) + "\n")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT / "src")}
    out = subprocess.run([sys.executable, "-m", "covey.cli", "config", "show", "model.name=tiny-qwen2-vl",
                          "model.family=vision_language", "task.name=dataset", f"task.params={{path: {data}, verifier: none}}",
                          "rewards=[{name: length}]"], capture_output=True, text=True, timeout=300, env=env)  # fmt: skip
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.splitlines()[0] == f"error: {data}:1: image file '{tmp_path / 'nope.png'}' does not exist"
