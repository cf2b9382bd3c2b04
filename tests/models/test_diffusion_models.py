"""Loading a masked-diffusion checkpoint from a local folder (the path a real LLaDA/Dream folder takes)."""

import json

import torch

from covey.models import load
from covey.models.diffusion import family_of_config, logit_shift, mask_token_id
from covey.models.loading import model_config


def test_saved_tiny_llada_folder_loads_bidirectional(tmp_path):
    model, tok = load("tiny-llada")
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    cfg = json.loads((tmp_path / "config.json").read_text())
    assert cfg["is_causal"] is False and family_of_config(model_config(str(tmp_path))) == "masked_diffusion"
    again, tok2 = load(str(tmp_path))
    assert again.config.is_causal is False and mask_token_id(again, tok2) == 358 and logit_shift(again) == 0
    x = torch.tensor([[5, 6, 7, 8]])
    y = x.clone()
    y[0, -1] = 9
    with torch.no_grad():
        assert torch.allclose(again(input_ids=x).logits, model(input_ids=x).logits, atol=1e-6)
        assert not torch.allclose(again(input_ids=x).logits[0, 0], again(input_ids=y).logits[0, 0])


def test_family_of_config():
    assert family_of_config(model_config("tiny-llama")) == "causal"
    assert family_of_config(model_config("tiny-llada")) == "masked_diffusion"
    assert family_of_config({"model_type": "llada"}) == "masked_diffusion"
    assert family_of_config({"model_type": "Dream"}) == "masked_diffusion"
    assert family_of_config(None) is None
