"""Model loading: tiny aliases, the SmolLM2 GGUF conversion cache, chat prompts."""

import json

import pytest
import torch

from covey.models import ALIASES, apply_chat, load, portable_model_name, prepare, verify_folder
from covey.models.convert import CHECKSUM_FILE


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-qwen2"])
def test_tiny_alias_builds_deterministically_from_seed(name):
    a, tok = load(name, seed=3)
    b, _ = load(name, seed=3)
    c, _ = load(name, seed=4)
    sa, sb, sc = a.state_dict(), b.state_dict(), c.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert not torch.equal(sa["model.layers.0.mlp.up_proj.weight"], sc["model.layers.0.mlp.up_proj.weight"])
    n_params = sum(p.numel() for p in a.parameters())
    assert 100_000 < n_params < 5_000_000
    assert a.config.vocab_size == len(tok)


def test_tiny_tokenizer_round_trips_text_and_covers_arithmetic():
    _, tok = load("tiny-llama")
    text = "What is 12*(3+4)-5/6?\nAnswer: 79 é ✓"
    ids = tok.encode(text)
    assert tok.decode(ids) == text
    assert tok.unk_token_id not in ids  # byte fallback covers non-ASCII
    assert len(tok.encode("1234")) == 4  # one token per character
    assert tok.eos_token == "<|im_end|>" and tok.pad_token_id != tok.eos_token_id


def test_tiny_overrides_change_config_and_dtype():
    model, _ = load("tiny-qwen2", dtype="bf16", hidden_size=64, num_hidden_layers=2, num_attention_heads=4)
    assert model.config.hidden_size == 64 and model.config.num_hidden_layers == 2
    assert next(model.parameters()).dtype == torch.bfloat16


def test_apply_chat_uses_template_for_messages_and_plain_encode_for_text():
    _, tok = load("tiny-llama")
    ids = apply_chat(tok, [{"role": "user", "content": "2+3"}])
    assert tok.decode(ids) == "<|im_start|>user\n2+3<|im_end|>\n<|im_start|>assistant\n"
    assert apply_chat(tok, "2+3") == tok.encode("2+3")
    with pytest.raises(ValueError, match="role"):
        apply_chat(tok, [{"content": "x"}])
    with pytest.raises(ValueError, match="str or a non-empty list"):
        apply_chat(tok, 5)


def test_load_rejects_bad_dtype_and_missing_path(tmp_path):
    with pytest.raises(ValueError, match="dtype must be one of"):
        load("tiny-llama", dtype="float8")
    with pytest.raises(FileNotFoundError, match="not a folder"):
        load(str(tmp_path / "nope"))
    with pytest.raises(ValueError, match="only to the tiny models"):
        load(str(tmp_path), hidden_size=3)


def test_local_folder_loads_like_the_saved_model(tmp_path):
    model, tok = load("tiny-qwen2", seed=1)
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    again, tok2 = load(str(tmp_path))
    assert torch.equal(model.model.layers[0].self_attn.q_proj.weight, again.model.layers[0].self_attn.q_proj.weight)
    assert tok2.chat_template == tok.chat_template


@pytest.mark.slow
def test_smollm2_alias_converts_verifies_and_answers():
    # Converts into the covey cache on first use (~20 s), reuses it after; the reconversion logic
    # itself is tested with a stand-in converter below.
    folder = prepare("smollm2-135m-instruct")
    assert verify_folder(folder)
    record = json.loads((folder / CHECKSUM_FILE).read_text())
    assert "model.safetensors" in record["files"]
    assert json.loads((folder / "config.json").read_text())["architectures"] == ["LlamaForCausalLM"]
    assert portable_model_name(folder) == "HuggingFaceTB/SmolLM2-135M-Instruct"

    model, tok = load("smollm2-135m-instruct")
    assert model.config.model_type == "llama" and model.lm_head.weight is model.model.embed_tokens.weight
    assert "<|im_start|>" in tok.chat_template
    ids = apply_chat(tok, [{"role": "user", "content": "What is 2+3?"}])
    out = model.generate(torch.tensor([ids]), max_new_tokens=16, do_sample=False)
    assert "5" in tok.decode(out[0, len(ids):])
    assert "smollm2-135m-instruct" in ALIASES


def test_corrupt_cache_folder_fails_verification(tmp_path):
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "a.bin").write_bytes(b"abc")
    assert not verify_folder(folder)  # no checksum record yet
    # sha256("abc"), recorded as a real conversion would
    digest = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    (folder / CHECKSUM_FILE).write_text(json.dumps({"files": {"a.bin": digest}}))
    assert verify_folder(folder)
    (folder / "a.bin").write_bytes(b"abd")
    assert not verify_folder(folder)


def test_prepare_converts_once_and_reconverts_a_corrupt_folder(tmp_path, monkeypatch):
    import covey.models.convert as convert

    calls = []

    def fake_convert(alias, out):  # stands in for the 20 s GGUF conversion; same record format
        calls.append(alias)
        (out / "model.safetensors").write_bytes(b"weights")
        sums = {"model.safetensors": convert._sha256(out / "model.safetensors")}
        (out / CHECKSUM_FILE).write_text(json.dumps({"alias": alias, "version": convert.CONVERT_VERSION, "files": sums}))

    monkeypatch.setattr(convert, "_convert_into", fake_convert)
    folder = prepare("smollm2-135m-instruct", cache_dir=tmp_path)
    assert folder == tmp_path / "models" / "smollm2-135m-instruct" and len(calls) == 1
    prepare("smollm2-135m-instruct", cache_dir=tmp_path)
    assert len(calls) == 1  # intact: reused
    (folder / "model.safetensors").write_bytes(b"truncated")
    prepare("smollm2-135m-instruct", cache_dir=tmp_path)
    assert len(calls) == 2 and (folder / "model.safetensors").read_bytes() == b"weights"
    assert [p.name for p in (tmp_path / "models").iterdir()] == ["smollm2-135m-instruct"]  # no temp leftovers
    record = json.loads((folder / CHECKSUM_FILE).read_text())
    (folder / CHECKSUM_FILE).write_text(json.dumps({**record, "version": 1}))  # intact, but an older converter's
    prepare("smollm2-135m-instruct", cache_dir=tmp_path)
    assert len(calls) == 3 and json.loads((folder / CHECKSUM_FILE).read_text())["version"] == convert.CONVERT_VERSION


def test_portable_model_name_of_alias_folders_and_hub_snapshots(tmp_path):
    alias = tmp_path / "models" / "smollm2-135m-instruct"
    alias.mkdir(parents=True)
    (alias / CHECKSUM_FILE).write_text(json.dumps({"alias": "smollm2-135m-instruct", "files": {}}))
    assert portable_model_name(alias) == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert portable_model_name(str(alias)) == "HuggingFaceTB/SmolLM2-135M-Instruct"
    snap = "/home/u/.cache/huggingface/hub/models--Qwen--Qwen2.5-0.5B-Instruct/snapshots/7ae557604adf67be50417f59c2c2f167def9a775"
    assert portable_model_name(snap) == "Qwen/Qwen2.5-0.5B-Instruct"
    assert portable_model_name(str(tmp_path)) == str(tmp_path)  # a plain local folder stays as it is
    assert portable_model_name("org/name") == "org/name" and portable_model_name("") is None


def test_hub_id_of_a_built_in_alias_loads_the_alias_offline(tmp_path, monkeypatch, caplog):
    """HuggingFaceTB/SmolLM2-135M-Instruct is the smollm2-135m-instruct alias: offline and uncached it
    resolves to the alias (with a warning), any spelling of the id; another id still fails."""
    from covey.models import loading

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))  # an empty HF cache
    model, tok = load("tiny-llama", seed=3)
    model.save_pretrained(tmp_path / "alias")
    tok.save_pretrained(tmp_path / "alias")
    asked = []
    monkeypatch.setattr(loading, "prepare", lambda alias, cache_dir=None: asked.append(alias) or tmp_path / "alias")
    monkeypatch.setattr(loading, "_ALIAS_WARNED", set())
    loading.check_name("HuggingFaceTB/SmolLM2-135M-Instruct")  # no `unknown model`
    with caplog.at_level("WARNING", logger="covey"):
        again, _ = load("huggingfacetb/smollm2-135m-instruct")
    assert asked == ["smollm2-135m-instruct"]
    assert torch.equal(again.lm_head.weight, model.lm_head.weight)
    assert "using the built-in alias smollm2-135m-instruct" in caplog.text and "Q4_1" in caplog.text
    assert loading.hub_alias("Qwen/Qwen2.5-0.5B-Instruct") is None
    with pytest.raises(FileNotFoundError, match="unknown model 'Qwen/Qwen2.5-0.5B-Instruct'"):
        loading.check_name("Qwen/Qwen2.5-0.5B-Instruct")
