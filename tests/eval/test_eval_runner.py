import torch

from covey.eval import evaluate, pass_at_k
from covey.models import build_tiny_tokenizer
from covey.engine import Generation
from covey.tasks import get_task


class ScriptedEngine:
    """An Engine that answers every prompt with the same scripted completions (one group of n)."""

    def __init__(self, tokenizer, texts):
        self.tokenizer, self.texts = tokenizer, texts

    def generate(self, prompts, n, sampling):
        assert n == len(self.texts)
        rows = [self.tokenizer.encode(t) for _ in prompts for t in self.texts]
        width = max(len(r) for r in rows)
        ids = torch.tensor([r + [0] * (width - len(r)) for r in rows])
        mask = torch.tensor([[1.0] * len(r) + [0.0] * (width - len(r)) for r in rows])
        index = torch.arange(len(prompts)).repeat_interleave(n)
        return Generation([torch.tensor(p) for p in prompts for _ in range(n)], ids, mask, torch.zeros_like(mask),
                          ["stop"] * len(rows), index)  # fmt: skip

    def load_weights(self, source, version=None):
        pass

    def close(self):
        pass


def test_pass_at_k_and_maj_at_k_on_a_hand_example():
    tok = build_tiny_tokenizer()
    task = get_task("arithmetic", n_train=0, n_test=1, chat=False)
    item = task.examples("test")[0]
    gold = item["answer"]
    wrong = str(int(gold) + 1)
    # 5 samples, 2 right: pass@1 = 2/5, pass@2 = 1 - C(3,2)/C(5,2) = 1 - 3/10 = 0.7, pass@5 = 1.
    # votes over all 5: gold x2, wrong x2, "0" x1 -> tie, the first seen (gold) wins -> maj@5 = 1.
    # votes over the first 2: gold, wrong -> tie, gold first -> maj@2 = 1.
    texts = [f"= {gold}", f"= {wrong}", f"= {gold}", f"= {wrong}", "0"]
    res = evaluate(ScriptedEngine(tok, texts), tok, task, [item], n=5, ks=(1, 2, 5), temperature=1.0)
    assert res["accuracy"] == 0.4
    assert abs(res["pass@2"] - 0.7) < 1e-12 and abs(res["pass@2"] - pass_at_k(5, 2, 2)) < 1e-12
    assert abs(res["pass@1"] - 0.4) < 1e-12 and res["pass@5"] == 1.0
    assert res["maj@5"] == 1.0 and res["maj@2"] == 1.0
    # wrong answers first: the majority of 3 wrong beats 2 right
    res = evaluate(ScriptedEngine(tok, [f"{wrong}"] * 3 + [gold] * 2), tok, task, [item], n=5, ks=(5,), temperature=1.0)
    assert res["maj@5"] == 0.0 and res["pass@5"] == 1.0


def test_k_larger_than_n_is_rejected():
    tok = build_tiny_tokenizer()
    task = get_task("arithmetic", n_train=0, n_test=1, chat=False)
    try:
        evaluate(ScriptedEngine(tok, ["1"]), tok, task, task.examples("test"), n=1, ks=(2,))
    except ValueError as e:
        assert "k <= n" in str(e)
    else:
        raise AssertionError("k > n accepted")


def test_run_rewards_give_per_column_means_and_accuracy_from_the_verifier_column():
    from covey.rewards import RewardRunner, RewardSpec

    tok = build_tiny_tokenizer()
    task = get_task("arithmetic", n_train=0, n_test=2, chat=False)
    items = list(task.examples("test"))
    golds = [it["answer"] for it in items]

    def chars(prompts, completions, **kw):
        return [float(len(c)) for c in completions]

    texts = [f"= {golds[0]}", "xx"]  # item 0: right then wrong; item 1: both wrong unless its gold is item 0's
    assert golds[0] != golds[1]
    runner = RewardRunner([(task.reward, RewardSpec(name="accuracy")), (chars, RewardSpec(name="chars", weight=0.5))], workers=0)
    done = []
    res = evaluate(ScriptedEngine(tok, texts), tok, task, items, n=2, ks=(1, 2), temperature=1.0, rewards=runner,
                   progress=done.append, batch_prompts=1)  # fmt: skip
    n0 = len(texts[0])
    assert res["reward/accuracy"] == 0.25  # 1 right of 4
    assert res["reward/chars"] == (n0 + 2) / 2  # each item: n0 and 2 characters
    assert res["reward"] == 0.25 + 0.5 * (n0 + 2) / 2
    assert res["accuracy"] == 0.25 and res["pass@2"] == 0.5 and res["pass@1"] == 0.25
    assert done == [1, 2]  # one progress call per batch of prompts
    # no verifier column: only the reward means
    only = RewardRunner([(chars, RewardSpec(name="chars"))], workers=0)
    res = evaluate(ScriptedEngine(tok, texts), tok, task, items, n=2, temperature=1.0, rewards=only)
    assert res == {"problems": 2, "samples_per_problem": 2, "reward/chars": (n0 + 2) / 2, "reward": (n0 + 2) / 2}


def test_eval_progress_plain_lines(capsys):
    from rich.console import Console

    from covey.eval.runner import eval_progress

    console = Console(file=__import__("sys").stdout, force_terminal=False)
    with eval_progress(4, console=console, label="eval") as advance:
        advance(2)
        advance(4)
    lines = capsys.readouterr().out.splitlines()
    assert [ln.split(" | ")[0] for ln in lines] == ["eval: 2/4 problems", "eval: 4/4 problems"]
    assert lines[1].endswith("ETA 0:00")


def test_eval_progress_bar_on_a_terminal():
    import io

    from rich.console import Console

    from covey.eval.runner import eval_progress

    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, width=100)
    with eval_progress(4, console=console, label="eval") as advance:
        advance(4)
    text = buf.getvalue()
    assert "4/4" in text and "\x1b[" in text and "problems |" not in text  # a rich bar, not the plain line
