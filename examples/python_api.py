"""covey from Python, the way TRL's GRPOTrainer is used: a list of dicts, a plain reward function
(closures and functions defined in this script are fine), one call to train.

    .venv/bin/python examples/python_api.py

No `if __name__ == "__main__":` guard is needed: reward workers never re-run this script.
Runs two steps on the tiny random model in a few seconds; swap in "smollm2-135m-instruct" and
more steps for a real run.
"""

from covey import GRPOTrainer

rows = [{"prompt": f"What is {a} + {b}? Answer with a number.", "answer": str(a + b)} for a in range(6) for b in range(6)]
max_chars = 12


def concise(completions, **kwargs):
    """TRL's signature: completions (str, or [{"role": "assistant", "content": ...}] for chat prompts)."""
    texts = [c if isinstance(c, str) else c[0]["content"] for c in completions]
    return [1.0 if len(t) <= max_chars else 0.0 for t in texts]


trainer = GRPOTrainer(
    model="tiny-llama",
    reward_funcs=[concise],          # plus the `answer` column's verifier, as reward column `accuracy`
    train_dataset=rows,
    config={
        "algo": "dapo",
        "steps": 2,
        "rollout": {"prompts_per_step": 4, "group_size": 4},
        "sampling": {"max_new_tokens": 8},
        "log": {"dir": "runs", "progress": False},
    },
)
metrics = trainer.train()
print({k: metrics[k] for k in ("reward/mean", "reward/concise/mean", "run_dir") if k in metrics})
trainer.close()
