"""TRL's documented VLM GRPO script (huggingface/trl f2cd57710ae3 examples/scripts/grpo_vlm.py) on covey:
the same code with `from covey import ...` instead of `from trl import ...`.

    .venv/bin/python examples/trl_vlm_script.py

Two things differ from TRL's file, neither in the training code: the data are 8 generated images in a
`datasets` Image column instead of `load_dataset("lmms-lab/multimodal-open-r1-8k-verified")` (no hub
here), and the model is covey's tiny random Qwen2-VL saved to a folder (the script loads it by path, as
TRL loads `--model_name_or_path`), with the arguments TRL's parser would give as a GRPOConfig. TRL's
`think_format_reward` and `accuracy_reward` score it (they need math_verify). docs/vlm.md, docs/from-trl.md.
"""

import tempfile

import torch
from datasets import Dataset, Image
from PIL import Image as PILImage

from covey import GRPOConfig, GRPOTrainer  # was: from trl import GRPOConfig, GRPOTrainer, ...
from covey.models import load
from trl.rewards import accuracy_reward, think_format_reward

# --- what TRL's parser and the hub would provide ------------------------------------------------------
model_name_or_path = tempfile.mkdtemp(prefix="tiny-qwen2-vl-")
tiny_model, tiny_processor = load("tiny-qwen2-vl")
tiny_model.save_pretrained(model_name_or_path)
tiny_processor.save_pretrained(model_name_or_path)
training_args = GRPOConfig(output_dir="runs/trl-vlm-script", learning_rate=1e-5, max_completion_length=8, num_generations=4,
                           per_device_train_batch_size=8, max_steps=1, report_to="none", save_strategy="no",
                           use_cpu=True, bf16=False, gradient_checkpointing=False)  # fmt: skip
colors = [(220, 40, 40), (40, 170, 60), (40, 80, 220), (230, 200, 30)]
rows = [{"image": PILImage.new("RGB" if i % 2 else "RGBA", (56, 56), c), "problem": f"How many sides has shape {i}?",
         "solution": f"${i + 3}$"} for i, c in enumerate(colors * 2)]  # fmt: skip
dataset = Dataset.from_list(rows).cast_column("image", Image())

# --- TRL's grpo_vlm.py from here on ---------------------------------------------------------------------
dtype = torch.float32
training_args.model_init_kwargs = dict(dtype=dtype)

dataset = dataset.train_test_split(test_size=2, seed=42)

SYSTEM_PROMPT = (
    "A conversation between user and assistant. The user asks a question, and the assistant solves it. The "
    "assistant first thinks about the reasoning process in the mind and then provides the user with the answer. "
    "The reasoning process and answer are enclosed within <think></think> tags, i.e., <think>\nThis is my "
    "reasoning.\n</think>\nThis is my answer."
)


def make_conversation(example):
    prompt = [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": example["problem"]},
    ]
    return {"prompt": prompt}


dataset = dataset.map(make_conversation)


def filter_big_images(example):
    image = example["image"]
    return image.size[0] < 512 and image.size[1] < 512


dataset = dataset.filter(filter_big_images)


def convert_to_rgb(example):
    image = example["image"]
    if image.mode != "RGB":
        image = image.convert("RGB")
    example["image"] = image
    return example


dataset = dataset.map(convert_to_rgb)

train_dataset = dataset["train"]
eval_dataset = dataset["test"] if training_args.eval_strategy != "no" else None

trainer = GRPOTrainer(
    model=model_name_or_path,
    args=training_args,
    reward_funcs=[think_format_reward, accuracy_reward],
    train_dataset=train_dataset,
    eval_dataset=eval_dataset,
    quantization_config=None,
    peft_config=None,
)

trainer.train()

trainer.save_model(training_args.output_dir)
trainer.close()
