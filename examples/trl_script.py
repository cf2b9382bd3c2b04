"""A TRL GRPO script on covey: the same code with `from covey import ...` instead of `from trl import ...`.

    .venv/bin/python examples/trl_script.py

Multi-task rewards in TRL's style (each returns None where it does not apply), reward weights,
LoRA through a peft LoraConfig, a DatasetDict. One step on the tiny random model; swap in
"HuggingFaceTB/SmolLM2-135M-Instruct" (or covey's alias "smollm2-135m-instruct") and more steps
for a real run. docs/from-trl.md lists how every GRPOConfig field maps.
"""

from datasets import Dataset, DatasetDict
from peft import LoraConfig

from covey import GRPOConfig, GRPOTrainer  # was: from trl import GRPOConfig, GRPOTrainer

rows = [{"prompt": f"What is {a} + {b}?", "answer": str(a + b), "task": "math"} for a in range(4) for b in range(4)]
rows += [{"prompt": f"Say '{w}' in one word.", "answer": w, "task": "echo"} for w in ("yes", "no", "hi", "ok")]
dataset = DatasetDict({"train": Dataset.from_list(rows)})


def math_reward(completions, answer, task, **kwargs):
    return [float(a in c) if t == "math" else None for c, a, t in zip(completions, answer, task)]


def echo_reward(completions, answer, task, **kwargs):
    return [float(c.strip().lower().startswith(a)) if t == "echo" else None for c, a, t in zip(completions, answer, task)]


async def brevity(completions, **kwargs):  # async rewards work as in TRL
    return [-len(c) / 100 for c in completions]


args = GRPOConfig(
    output_dir="runs/trl-script",
    num_generations=4,
    per_device_train_batch_size=8,
    max_completion_length=8,
    max_steps=1,
    learning_rate=1e-5,
    reward_weights=[1.0, 1.0, 0.1],
    report_to="none",
    save_strategy="no",
    use_cpu=True,
    bf16=False,
    gradient_checkpointing=False,
)
trainer = GRPOTrainer(
    model="tiny-llama",
    reward_funcs=[math_reward, echo_reward, brevity],
    args=args,
    train_dataset=dataset["train"],
    peft_config=LoraConfig(r=8, lora_alpha=16, target_modules="all-linear"),
)
trainer.train()
trainer.close()
