"""`covey eval` studies options: --samples-out (records, resume after a kill), --shard, --k pow2, --by."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch
from typer.testing import CliRunner

from covey.cli import app
from covey.engine import Generation
from covey.eval import evaluate
from covey.eval.options import parse_ks, parse_shard, pow2_ks
from covey.eval.samples import open_samples, read_samples
from covey.models import build_tiny_tokenizer
from covey.tasks import get_task

runner = CliRunner()


class Scripted:
    """Answers every prompt with the same texts (one group of n); records the seeds it was called with."""

    def __init__(self, tokenizer, texts):
        self.tokenizer, self.texts, self.seeds = tokenizer, texts, []

    def generate(self, prompts, n, sampling):
        self.seeds.append(sampling.seed)
        rows = [self.tokenizer.encode(t) for _ in prompts for t in self.texts]
        width = max(len(r) for r in rows)
        ids = torch.tensor([r + [0] * (width - len(r)) for r in rows])
        mask = torch.tensor([[1.0] * len(r) + [0.0] * (width - len(r)) for r in rows])
        index = torch.arange(len(prompts)).repeat_interleave(n)
        return Generation([torch.tensor(p) for p in prompts for _ in range(n)], ids, mask, torch.zeros_like(mask),
                          ["stop"] * len(rows), index)  # fmt: skip


def test_k_pow2_and_shard_parsing():
    assert pow2_ks(1) == (1,) and pow2_ks(256) == (1, 2, 4, 8, 16, 32, 64, 128, 256)
    assert pow2_ks(300) == (1, 2, 4, 8, 16, 32, 64, 128, 256, 300) and pow2_ks(6) == (1, 2, 4, 6)
    assert parse_ks("pow2", 1024)[-1] == 1024 and parse_ks("1,4", 4) == (1, 4)
    assert parse_shard(None) == (0, 1) and parse_shard("2/3") == (2, 3)
    for bad in ("3/3", "-1/2", "1", "a/b"):
        with pytest.raises(ValueError, match="--shard"):
            parse_shard(bad)
    for bad, n in (("0,1", 4), ("5", 4), ("x", 4)):
        with pytest.raises(ValueError):
            parse_ks(bad, n)


def test_records_resume_after_a_torn_write_and_per_subset_metrics(tmp_path):
    tok = build_tiny_tokenizer()
    task = get_task("arithmetic", n_train=0, n_test=4, chat=False)
    items = list(task.examples("test"))  # answers 42, 40, 5, 6
    texts = ["42", "5", "40", "42"]  # problem 0: c=2/4, problem 1: c=1, problem 2: c=1, problem 3: c=0
    items = [{**it, "half": "lo" if i < 2 else "hi"} for i, it in enumerate(items)]
    out = tmp_path / "s.jsonl"
    eng = Scripted(tok, texts)
    res = evaluate(eng, tok, task, items, n=4, ks=(1, 2, 4), temperature=1.0, ids=[10, 11, 12, 13], seed=100,
                   batch_prompts=2, samples_out=out, meta={"x": 1}, by="half")  # fmt: skip
    assert eng.seeds == [110, 112]  # seed + the first problem id of each batch (distinct across shards)
    assert res["pass@1"] == pytest.approx((0.5 + 0.25 + 0.25 + 0) / 4)
    assert res["pass@2"] == pytest.approx((5 / 6 + 0.5 + 0.5 + 0) / 4)  # 1 - C(2,2)/C(4,2); 1 - C(3,2)/C(4,2)
    assert res["pass@4"] == 0.75 and res["maj@4"] == 0.25  # only problem 0's majority ("42") is right
    assert res["by"]["lo"] == pytest.approx({"problems": 2, "accuracy": 0.375, "pass@1": 0.375, "maj@1": 0.5, "pass@2": (5 / 6 + 0.5) / 2,
                                             "maj@2": 0.5, "pass@4": 1.0, "maj@4": 0.5})  # fmt: skip
    assert res["by"]["hi"]["pass@4"] == 0.5 and res["by"]["hi"]["problems"] == 2
    lines = out.read_text().splitlines()
    assert json.loads(lines[0]) == {"meta": {"x": 1}} and len(lines) == 17
    rec = json.loads(lines[1])
    assert rec == {"problem_id": 10, "sample": 0, "seed": 110, "correct": True, "score": 1.0, "answer": "42",
                   "length": len(tok.encode("42")), "finish": "stop", "completion": "42"}  # fmt: skip
    # a kill in the middle of the second batch's write: 1 batch + a torn line remain
    full = out.read_text()
    out.write_text("".join(line + "\n" for line in lines[:9]) + lines[9][:20])
    eng = Scripted(tok, texts)
    again = evaluate(eng, tok, task, items, n=4, ks=(1, 2, 4), temperature=1.0, ids=[10, 11, 12, 13], seed=100,
                     batch_prompts=2, samples_out=out, meta={"x": 1}, by="half")  # fmt: skip
    assert eng.seeds == [112]  # only the unfinished batch is sampled again
    assert out.read_text() == full and again.pop("resumed_problems") == 2 and again == res
    with pytest.raises(ValueError, match="other settings"):
        open_samples(out, {"x": 2}, 4)
    meta, recs = read_samples([out])
    assert meta == {"x": 1} and sorted(recs) == [10, 11, 12, 13]


def test_cli_rejects_bad_study_options_before_loading(tmp_path):
    base = ["eval", "--model", "tiny-llama", "--task", "arithmetic", "--task-param", "n_test=2"]
    for extra, msg in ((["--shard", "2/2"], "--shard"), (["--k", "pow3"], "--k"), (["--top-p", "0"], "--top-p"),
                       (["--by", "nope"], "--by 'nope'"), (["--n", "2", "--k", "4"], "<= n=2")):  # fmt: skip
        res = runner.invoke(app, base + extra)
        assert res.exit_code == 2 and msg in res.output, (extra, res.output)
    f = tmp_path / "s.jsonl"
    f.write_text(json.dumps({"meta": {"task": "other"}}) + "\n")
    res = runner.invoke(app, base + ["--samples-out", str(f)])
    assert res.exit_code == 2 and "other settings" in res.output
    res = runner.invoke(app, base + ["--samples-out", str(tmp_path)])
    assert res.exit_code == 2 and "is a folder" in res.output


COVEY = [sys.executable, "-m", "covey.cli"]
ENV = {**os.environ, "PYTHONHASHSEED": "0", "OMP_NUM_THREADS": "1"}


def test_samples_out_resumes_after_a_kill(tmp_path):
    args = ["eval", "--model", "tiny-llama", "--task", "arithmetic", "--task-param", "n_test=8", "--n", "2", "--k", "pow2",
            "--temperature", "1.0", "--top-p", "0.95", "--max-new-tokens", "8", "--batch-prompts", "1", "--seed", "3"]  # fmt: skip
    straight, killed = tmp_path / "straight.jsonl", tmp_path / "killed.jsonl"
    done = subprocess.run(COVEY + args + ["--samples-out", str(straight)], env=ENV, capture_output=True, text=True, check=True)
    proc = subprocess.Popen(COVEY + args + ["--samples-out", str(killed)], env=ENV, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)  # fmt: skip
    deadline = time.time() + 300
    while not killed.exists() or killed.read_text().count("\n") < 3:  # header + the first problem's 2 records
        assert proc.poll() is None and time.time() < deadline, "eval ended before it could be killed"
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    written = killed.read_text().count("\n")
    assert 3 <= written < 17  # killed part-way: not every problem was written
    resumed = subprocess.run(COVEY + args + ["--samples-out", str(killed)], env=ENV, capture_output=True, text=True, check=True)
    assert killed.read_text() == straight.read_text()  # the same samples, each problem once
    a, b = json.loads(done.stdout.splitlines()[-1]), json.loads(resumed.stdout.splitlines()[-1])
    assert b.pop("resumed_problems") >= 1 and a == b and a["problems"] == 8 and "pass@2" in a


def test_nll_scorer_matches_a_direct_forward():
    from covey.eval.crossppl import nll_scorer, summarize_nll
    from covey.models import apply_chat
    from covey.train.config import ModelConfig
    from covey.train.setup import load_policy

    model, tok = load_policy(ModelConfig(name="tiny-llama"))
    items = [{"prompt": "What is 2 + 2?"}, {"prompt": "Hi"}]
    texts = ["4 is it", ""]
    got = nll_scorer(model, tok)(items, texts)
    p, c = apply_chat(tok, items[0]["prompt"]), tok.encode(texts[0], add_special_tokens=False)
    with torch.no_grad():
        logits = model(torch.tensor([p + c])).logits[0].float()
    logp = torch.log_softmax(logits[len(p) - 1 : -1], -1)[torch.arange(len(c)), torch.tensor(c)]
    assert got[0][1] == len(c) and got[0][0] == pytest.approx(float(-logp.sum()), rel=1e-4)
    assert got[1] == (0.0, 0)  # an empty completion has no tokens
    s = summarize_nll(got)
    assert s["tokens"] == len(c) and s["perplexity"] == pytest.approx(float(torch.exp(-logp.mean())), rel=1e-4)


def test_eval_records_the_nll_under_another_model(tmp_path):
    tok = build_tiny_tokenizer()
    task = get_task("arithmetic", n_train=0, n_test=2, chat=False)
    items = list(task.examples("test"))
    calls = []

    def fake(rows, texts):  # (sum NLL, tokens): 2.0 per token
        calls.append(len(texts))
        return [(2.0 * len(t), len(t)) for t in texts]

    out = tmp_path / "s.jsonl"
    res = evaluate(Scripted(tok, ["12", "3"]), tok, task, items, n=2, temperature=1.0, samples_out=out, nll_under=fake)
    assert calls == [4] and res["logprob_under"] == {"nll_per_token": 2.0, "perplexity": pytest.approx(7.389056), "tokens": 6}
    rec = json.loads(out.read_text().splitlines()[1])
    assert rec["nll_under"] == 2.0 and rec["nll_sum"] == 4.0 and rec["nll_tokens"] == 2
    again = evaluate(Scripted(tok, ["12", "3"]), tok, task, items, n=2, temperature=1.0, samples_out=out, nll_under=fake)
    assert calls == [4] and again["logprob_under"] == res["logprob_under"]  # resumed from the records


def test_read_samples_merges_shards_of_one_evaluation_only(tmp_path):
    def shard(name, meta, pids):
        rec = {"sample": 0, "seed": 0, "correct": True, "score": 1.0, "answer": None, "length": 1, "finish": "stop", "completion": ""}
        (tmp_path / name).write_text("\n".join([json.dumps({"meta": meta})] + [json.dumps({**rec, "problem_id": p}) for p in pids]) + "\n")
        return tmp_path / name

    a = shard("a.jsonl", {"model": "m", "shard": "0/2"}, [0, 2])
    b = shard("b.jsonl", {"model": "m", "shard": "1/2"}, [1, 3])
    meta, recs = read_samples([a, b])
    assert sorted(recs) == [0, 1, 2, 3] and meta["model"] == "m"
    with pytest.raises(ValueError, match="other settings"):
        read_samples([a, shard("c.jsonl", {"model": "other", "shard": "1/2"}, [1, 3])])
    with pytest.raises(ValueError, match="more than one samples file"):
        read_samples([a, shard("d.jsonl", {"model": "m", "shard": "1/2"}, [2])])
