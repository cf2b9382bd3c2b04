"""Write a set of STARLING-style text games (covey.tasks.starling) to a JSONL file.

    python scripts/make_starling_games.py                      # the shipped set: slot-filled, 4 games per idea
    python scripts/make_starling_games.py --backend '{"kind": "openai", "model": "m", "base_url": "http://127.0.0.1:8000/v1"}' \
        --n 40 --out runs/starling/games.jsonl                # written by a model from the seed ideas, 3 examples shown

A model's games are kept only when their walkthrough wins (`check_game`); the counts are printed. Use the
file with `task: {name: starling_provisional, params: {games: runs/starling/games.jsonl}}`.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

from covey.envs.llm import Asker
from covey.tasks.starling import BUILTIN, IDEAS, generate_games, slot_fill


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=str(BUILTIN))
    parser.add_argument("--per-idea", type=int, default=4, help="slot-filled games per idea")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--backend", default=None, help="a judge backend spec (JSON): a model writes the games")
    parser.add_argument("--n", type=int, default=40, help="games to ask the model for")
    parser.add_argument("--max-new-tokens", type=int, default=1024)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    if args.backend is None:
        games = [slot_fill(idea, rng) for _ in range(args.per_idea) for idea in IDEAS]
    else:
        examples = [slot_fill(idea, rng) for idea in list(IDEAS)[:3]]
        games, counts = generate_games(Asker(json.loads(args.backend), args.max_new_tokens), list(IDEAS), args.n, examples, args.seed)
        print(json.dumps(counts))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps(g, ensure_ascii=False, sort_keys=True) + "\n" for g in games))
    print(f"{len(games)} games -> {out}")


if __name__ == "__main__":
    main()
