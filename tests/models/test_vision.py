"""Vision-language model facts (covey.models.vision): the tiny model, the processor path, collation,
image loading and its errors, the family of a config, loading a saved folder."""

import pickle
import time

import pytest
import torch
from PIL import Image

from covey.family import family_of
from covey.models import apply_chat, load
from covey.models.loading import model_config
from covey.models.vision import (VisionPrompt, VisionTokenizer, collate, content_parts, is_vision_config, load_image,
                                 prompt_images, vision_module_names, vision_parameters, VisionInputs)  # fmt: skip


@pytest.fixture(scope="module")
def tiny():
    return load("tiny-qwen2-vl")


def _chat(*parts):
    return [{"role": "user", "content": list(parts)}]


def test_tiny_vision_model_builds_in_well_under_a_second_and_is_seeded():
    t0 = time.perf_counter()
    a, _ = load("tiny-qwen2-vl", seed=3)
    assert time.perf_counter() - t0 < 5.0  # ~0.05 s alone; generous for a loaded shared CPU
    b, _ = load("tiny-qwen2-vl", seed=3)
    c, _ = load("tiny-qwen2-vl", seed=4)
    sa, sb, sc = a.state_dict(), b.state_dict(), c.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert not all(torch.equal(sa[k], sc[k]) for k in sa)
    assert 150_000 < sum(p.numel() for p in a.parameters()) < 300_000


def test_tiny_config_read_without_building_matches_the_model(tiny):
    cfg = model_config("tiny-qwen2-vl")
    model, tok = tiny
    assert cfg["model_type"] == model.config.model_type == "qwen2_vl"
    assert cfg["vocab_size"] == len(tok) == model.config.get_text_config().vocab_size == 362
    assert is_vision_config(cfg) and family_of(cfg) == "vision_language"
    assert family_of(model_config("tiny-llama")) == "causal" and family_of(model_config("tiny-llada")) == "masked_diffusion"


def test_an_image_becomes_one_token_per_28_pixel_square_between_vision_tokens(tiny):
    _, tok = tiny
    ids = apply_chat(tok, _chat({"type": "image", "image": Image.new("RGB", (56, 84))}, {"type": "text", "text": "hi"}))
    assert isinstance(ids, VisionPrompt)
    # 56 wide x 84 high = 2 x 3 merged 28 x 28 squares = 6 tokens; grid (t, h, w) = (1, 6, 4) patches of 3*2*14*14 values
    pad = tok.convert_tokens_to_ids("<|image_pad|>")
    start, end = tok.convert_tokens_to_ids(["<|vision_start|>", "<|vision_end|>"])
    assert ids.count(pad) == 6 and ids[ids.index(start) + 7] == end
    assert ids.vision.tensors["image_grid_thw"].tolist() == [[1, 6, 4]]
    assert tuple(ids.vision.tensors["pixel_values"].shape) == (24, 1176)
    assert tok.decode([t for t in ids if t != pad], skip_special_tokens=True).endswith("user\nhi\nassistant\n")


def test_a_chat_without_images_has_no_vision_inputs_and_a_string_prompt_is_plain_text(tiny):
    _, tok = tiny
    ids = apply_chat(tok, [{"role": "user", "content": "2+2?"}])
    assert ids.vision is None and tok.decode(ids) == "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n"
    assert apply_chat(tok, "abc") == tok.encode("abc")


def test_a_text_only_tokenizer_refuses_image_parts():
    _, tok = load("tiny-llama")
    with pytest.raises(ValueError, match="text-only model"):
        apply_chat(tok, _chat({"type": "image", "image": Image.new("RGB", (28, 28))}, {"type": "text", "text": "x"}))
    assert apply_chat(tok, _chat({"type": "text", "text": "x"})) == apply_chat(tok, [{"role": "user", "content": "x"}])


def test_vision_tokenizer_acts_as_its_tokenizer_and_pickles(tiny):
    _, tok = tiny
    assert (tok.pad_token_id, tok.eos_token_id, len(tok)) == (0, 2, 362)
    assert tok.decode(tok.encode("ab")) == "ab"
    back = pickle.loads(pickle.dumps(tok))
    assert isinstance(back, VisionTokenizer) and back.encode("ab") == tok.encode("ab")
    with pytest.raises(AttributeError):
        tok.no_such_attribute  # noqa: B018


def test_over_budget_image_is_resized_by_the_processor_and_said_once(tiny, caplog):
    _, tok = tiny
    tok._warned = False
    big = Image.new("RGB", (560, 560))  # 313600 pixels > 28*28*64 = 50176
    with caplog.at_level("WARNING", logger="covey.models.vision"):
        a = apply_chat(tok, _chat({"type": "image", "image": big}))
        apply_chat(tok, _chat({"type": "image", "image": big}))
    assert sum("over the processor's budget" in r.message for r in caplog.records) == 1
    t, h, w = a.vision.tensors["image_grid_thw"][0].tolist()
    assert h * w * 14 * 14 <= 28 * 28 * 64 and h == w  # resized, aspect kept


def test_load_image_reads_paths_bytes_datasets_dicts_and_names_the_bad_file(tmp_path):
    img = Image.new("RGBA", (10, 7), (1, 2, 3, 4))
    img.save(tmp_path / "a.png")
    raw = (tmp_path / "a.png").read_bytes()
    for src in (str(tmp_path / "a.png"), raw, {"bytes": raw, "path": None}, img):
        out = load_image(src)
        assert out.mode == "RGB" and out.size == (10, 7) and out.getpixel((0, 0)) == (1, 2, 3)
    (tmp_path / "bad.png").write_bytes(raw[:30])  # a truncated PNG
    with pytest.raises(ValueError, match=r"row 3: image '.*bad.png' cannot be read"):
        load_image(str(tmp_path / "bad.png"), "row 3")
    with pytest.raises(ValueError, match="row 4: image file '.*nope.png' does not exist"):
        load_image(str(tmp_path / "nope.png"), "row 4")
    with pytest.raises(ValueError, match="must be a path, bytes or a PIL image, got int"):
        load_image(3)


def test_collate_concatenates_and_zero_pads_every_other_dim():
    a = VisionInputs({"pixel_values": torch.ones(1, 1, 2, 2), "grid": torch.tensor([[1, 2, 2]])})
    b = VisionInputs({"pixel_values": torch.full((1, 2, 2, 2), 2.0), "grid": torch.tensor([[1, 4, 4]])})
    out = collate([a, b])
    assert out["pixel_values"].shape == (2, 2, 2, 2) and out["grid"].tolist() == [[1, 2, 2], [1, 4, 4]]
    assert out["pixel_values"][0, 1].abs().sum() == 0 and bool((out["pixel_values"][1] == 2).all())


def test_content_helpers():
    assert content_parts("hi") == [{"type": "text", "text": "hi"}]
    prompt = [{"role": "system", "content": "s"}, {"role": "user", "content": [{"type": "image", "image": "x.png"},
                                                                               {"type": "text", "text": "t"}]}]
    assert prompt_images(prompt) == ["x.png"] and prompt_images("text") == [] and prompt_images(None) == []


def test_vision_parameters_are_the_tower_and_projector_only(tiny):
    model, _ = tiny
    names = [n for n, _ in vision_parameters(model)]
    assert names and all(n.startswith("visual.") for n in names)
    assert "visual.merger.mlp.2.weight" in names
    modules = vision_module_names(model)
    assert "model.visual.blocks.0.attn.qkv" in modules and not any("language_model" in m for m in modules)


def test_a_saved_folder_loads_back_offline_through_auto_classes(tiny, tmp_path):
    model, tok = tiny
    model.save_pretrained(tmp_path / "vl")
    tok.save_pretrained(tmp_path / "vl")
    assert family_of(model_config(str(tmp_path / "vl"))) == "vision_language"
    back, back_tok = load(str(tmp_path / "vl"))
    assert type(back).__name__ == "Qwen2VLForConditionalGeneration" and isinstance(back_tok, VisionTokenizer)
    msgs = _chat({"type": "image", "image": Image.new("RGB", (56, 56), (9, 9, 9))}, {"type": "text", "text": "q"})
    a, b = apply_chat(tok, msgs), apply_chat(back_tok, msgs)
    assert list(a) == list(b) and torch.equal(a.vision.tensors["pixel_values"], b.vision.tensors["pixel_values"])
    sa, sb = model.state_dict(), back.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
