"""Write tables.jsonl: small generated tables, each described in words (the prompt) with its LaTeX (the answer).

A text-only stand-in for Table2LaTeX-RL's table images: the rewards read only the reference LaTeX.
    python examples/judge/table2latex/make_tables.py      # deterministic (seed 0)
"""

import json
import random
from pathlib import Path

MODELS = ["Base", "SFT", "RL", "Ours", "Large", "Small"]
METRICS = ["Acc", "F1", "BLEU", "Time", "Params"]


def table(rng: random.Random) -> tuple[str, str]:
    cols = rng.sample(METRICS, rng.randint(2, 3))
    rows = rng.sample(MODELS, rng.randint(2, 4))
    values = [[f"{rng.uniform(10, 99):.1f}" for _ in cols] for _ in rows]
    group = rng.random() < 0.5  # a spanning header over the metric columns
    spec = "l" + "c" * len(cols)
    lines = [rf"\begin{{tabular}}{{{spec}}}", r"\toprule"]
    if group:
        lines.append(rf"\multirow{{2}}{{*}}{{Model}} & \multicolumn{{{len(cols)}}}{{c}}{{Results}} \\")
        lines.append(" & " + " & ".join(cols) + r" \\")
    else:
        lines.append("Model & " + " & ".join(cols) + r" \\")
    lines.append(r"\midrule")
    lines += [f"{m} & " + " & ".join(v) + r" \\" for m, v in zip(rows, values)]
    lines += [r"\bottomrule", r"\end{tabular}"]
    header = (f"a header cell 'Model' spanning two rows and a cell 'Results' spanning the {len(cols)} metric columns "
              f"above the metric names {', '.join(cols)}") if group else f"the header Model, {', '.join(cols)}"
    body = "; ".join(f"{m}: {', '.join(v)}" for m, v in zip(rows, values))
    prompt = (f"Write a LaTeX tabular (booktabs rules) with {header}, then one row per model: {body}. "
              "Reply with the tabular only.")
    return prompt, "\n".join(lines)


if __name__ == "__main__":
    rng = random.Random(0)
    out = Path(__file__).with_name("tables.jsonl")
    with out.open("w") as f:
        for i in range(16):
            prompt, latex = table(rng)
            f.write(json.dumps({"id": i, "prompt": prompt, "answer": latex}) + "\n")
    print(f"wrote {out}")
