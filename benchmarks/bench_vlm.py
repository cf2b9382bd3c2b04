"""Generation with images: covey's torch engine against HF `generate`, and one image prefill per group
against one per completion (docs/vlm.md, "Measured"). Prints one JSON line.

    .venv/bin/python benchmarks/bench_vlm.py --prompts 4 --group 8 --new-tokens 32 --threads 1

Every run produces exactly prompts x group x new_tokens tokens (EOS ignored: HF via min_new_tokens, covey via
ignore_eos), sampling at temperature 1 without truncation, in fp32 on the CPU, on the same chat prompts
(each with one image). Runs alternate (covey, covey with G prefills, HF, ...) so all see the same load;
medians of `--repeats`. "G prefills" gives the engine each prompt G times with n = 1: the vision tower
and the prompt's forward run once per completion instead of once per group. HF `generate` with
`num_return_sequences` = G also expands the inputs before its prefill (one prefill per completion).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time

import torch
from PIL import Image


def _cpu() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def main(model_name: str, prompts: int, group: int, new_tokens: int, size: int, repeats: int, threads: int) -> dict:
    from covey.engine import SamplingParams, TorchEngine
    from covey.models import apply_chat, load

    if threads:
        torch.set_num_threads(threads)
    model, tok = load(model_name)
    chats = [[{"role": "user", "content": [{"type": "image", "image": Image.new("RGB", (size, size), (40 * i, 90, 200 - 30 * i))},
                                           {"type": "text", "text": f"Describe picture {i} in a few words."}]}]
             for i in range(prompts)]  # fmt: skip
    ids = [apply_chat(tok, c) for c in chats]
    engine = TorchEngine(model, tok, dtype="fp32")
    sp = SamplingParams(max_new_tokens=new_tokens, ignore_eos=True, seed=0)
    tokens = prompts * group * new_tokens

    vision_calls = []
    hook = model.model.visual.register_forward_hook(lambda m, a, o: vision_calls.append(a[0].shape[0]))

    def covey_shared():
        return engine.generate(ids, group, sp)

    def covey_each():
        return engine.generate([p for p in ids for _ in range(group)], 1, sp)

    processor = tok.processor
    # the prompts have equal lengths: a batch without padding
    batch = processor.apply_chat_template(chats, add_generation_prompt=True, tokenize=True, return_dict=True, return_tensors="pt")

    def hf():
        with torch.inference_mode():
            return model.generate(**batch, do_sample=True, temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=new_tokens,
                                  min_new_tokens=new_tokens, num_return_sequences=group, pad_token_id=tok.pad_token_id)  # fmt: skip

    runs = {"covey": covey_shared, "covey_g_prefills": covey_each, "hf_generate": hf}
    for fn in runs.values():  # warm-up
        fn()
    patches = {}
    times: dict[str, list[float]] = {k: [] for k in runs}
    for _ in range(repeats):
        for name, fn in runs.items():
            vision_calls.clear()
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
            patches[name] = sum(vision_calls)
    hook.remove()
    med = {k: statistics.median(v) for k, v in times.items()}
    load1 = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    return {
        "model": model_name, "prompts": prompts, "group": group, "new_tokens": new_tokens, "image_px": size,
        "prompt_tokens": [len(p) for p in ids], "threads": torch.get_num_threads(), "cpu": _cpu(), "load_1min": load1,
        **{f"{k}_s": round(v, 4) for k, v in med.items()},
        **{f"{k}_tok_s": round(tokens / v, 1) for k, v in med.items()},
        "vision_patches_per_call": patches,
        "speedup_vs_hf": round(med["hf_generate"] / med["covey"], 3),
        "saved_by_one_prefill_per_group_s": round(med["covey_g_prefills"] - med["covey"], 4),
    }  # fmt: skip


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="tiny-qwen2-vl")
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--image-px", type=int, default=224, help="side of each square image (tiny-qwen2-vl: 224 = 64 image tokens)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    print(json.dumps(main(a.model, a.prompts, a.group, a.new_tokens, a.image_px, a.repeats, a.threads)))
