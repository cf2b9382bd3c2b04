"""PORTool's step rewards vs trajectory rewards on the same tool-call trees (docs/agents.md, "Evidence").

SmolLM2-135M-Instruct never calls the search tool on its own (8 of 8 probed episodes answered at once), so
the trees would have no branches and no outcome signal. The warm start imitates the two turns of a good
`search_qa` episode, in the episode's own format (the env's system prompt, the user question, then the
search call; and with the call and its tool message in the context, the answer alone):

    python benchmarks/portool_experiment.py --out runs/portool            # warm start, then AdaStop
    python benchmarks/portool_experiment.py --out runs/portool --sft-only

Then `covey compare adastop` trains both methods from the warm start (scripts/studies/configs/
portool_tree.yaml vs grpo_tree.yaml: the same `tool_tree` rollouts, only algo.advantage differs) and
compares the training success rate (reward/mean, last 3 steps), n = 4 seeds per method, K = 1.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
from pathlib import Path

from covey.envs import Action, ENVS, parse_tool_calls
from covey.tasks import get_task
from covey.train.sft import run_sft

TASK = {"n_entities": 50, "seed": 0, "n_train": 96, "n_test": 8}
ENV = {"k": 2, "max_calls": 2}


class TwoTurnSearch:
    """SFT items in the episode's format: turn 1 (system + question -> the search call) and turn 2
    (... + the call + its tool message -> the answer alone), half each."""

    name = "search_qa_two_turns"
    answer_format = "a search call, then the answer alone"

    def __init__(self):
        self.items = []
        for it in get_task("search_qa", **TASK).examples("train"):
            env = ENVS.build("search_qa", ENV)
            first = env.reset(it, seed=0)
            call = '<tool_call>{"name": "search", "arguments": {"query": ' + json.dumps(it["prompt"].rstrip("?")) + "}}</tool_call>"
            res = env.step(Action(call, [], parse_tool_calls(call)))
            self.items.append({"id": len(self.items), "prompt": first.messages, "target": call})
            convo = [*first.messages, {"role": "assistant", "content": call}, *res.messages]
            self.items.append({"id": len(self.items), "prompt": convo, "target": it["answer"]})
        random.Random(0).shuffle(self.items)

    def examples(self, split: str = "train") -> list[dict]:
        return self.items

    def demonstration(self, item: dict) -> str:
        return item["target"]

    def reward(self, prompts, completions, **_) -> list[float]:  # not used by SFT
        return [0.0] * len(completions)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="runs/portool")
    ap.add_argument("--sft-steps", type=int, default=120)
    ap.add_argument("--sft-only", action="store_true")
    args = ap.parse_args()
    out = Path(args.out)
    sft = out / "sft-search"
    if not (sft / "config.json").exists():
        print(json.dumps(run_sft("smollm2-135m-instruct", TwoTurnSearch(), sft, steps=args.sft_steps, batch_size=2, lr=3e-5,
                                 dtype="fp32")), flush=True)  # fmt: skip
    if args.sft_only:
        return
    configs = Path(__file__).parents[1] / "scripts" / "studies" / "configs"
    cmd = [sys.executable, "-m", "covey.cli", "compare", "adastop", "--agent", f"portool={configs / 'portool_tree.yaml'}",
           "--agent", f"grpo={configs / 'grpo_tree.yaml'}", "--runs-dir", str(out / "ada"), "--metric", "reward/mean",
           "--last", "3", "--n", "4", "--K", "1", "--seed", "0", "--train-override", f"model.name={sft}", "--out", str(out / "study")]
    subprocess.run(cmd, check=True)


if __name__ == "__main__":
    main()
