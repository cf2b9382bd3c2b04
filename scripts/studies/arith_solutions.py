"""The default `arithmetic` task's items with a worked solution column, for the hint studies (SEELE, HiLL).

    python scripts/studies/arith_solutions.py runs/studies/arith

writes OUT/train.jsonl and OUT/test.jsonl: the task's own prompts (chat) and answers, plus
``solution = "<expression> = <answer>"`` (a full solution whose prefixes are the hints).
"""

import json
import sys
from pathlib import Path

from covey.tasks import get_task


def main(out: str) -> None:
    task = get_task("arithmetic")
    Path(out).mkdir(parents=True, exist_ok=True)
    for split in ("train", "test"):
        with open(Path(out) / f"{split}.jsonl", "w") as f:
            for it in task.examples(split):
                row = {"prompt": it["prompt"], "answer": it["answer"], "solution": f"{it['expression']} = {it['answer']}"}
                f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "runs/studies/arith")
