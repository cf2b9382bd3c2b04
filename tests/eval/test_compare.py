"""`covey compare` on synthetic run folders and sample files made here (hand-computed values)."""

import csv
import json

import pytest
import yaml
from typer.testing import CliRunner

from covey.cli import app

runner = CliRunner()


def make_run(root, name, preset, seed, values, steps=None, metric="reward/mean"):
    run = root / name
    run.mkdir(parents=True)
    (run / "config.yaml").write_text(yaml.safe_dump({"algo": {"preset": preset, "advantage": {"name": preset}}, "seed": seed,
                                                     "steps": steps or len(values)}))  # fmt: skip
    rows = [{"step": 0, "eval/accuracy": 0.0}] + [{"step": i + 1, metric: v, "length/mean": 3.0} for i, v in enumerate(values)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run


def invoke(args):
    res = runner.invoke(app, args)
    return res, (json.loads(res.stdout.strip().splitlines()[-1]) if res.exit_code == 0 and "--json" in args else None)


def test_curves_orb_table_iqm_and_png(tmp_path):
    histories = ([1, 2, 3, 4, 5, 6], [2] * 6, [0, 1, 1, 1, 3, 5])  # last-3 means 5, 2, 3 (the ORB test vector)
    runs = [make_run(tmp_path, f"g{s}", "grpo", s, h) for s, h in zip((2, 0, 1), histories)]
    runs += [make_run(tmp_path, f"d{s}", "dr_grpo", s, [float(s)] * 6) for s in range(4)]
    out = tmp_path / "cmp"
    res, got = invoke(["compare", "curves", *map(str, runs), "--last", "3", "--out", str(out), "--json"])
    assert res.exit_code == 0, res.output
    grpo, dr = got["methods"]
    assert grpo["method"] == "grpo" and grpo["seeds"] == 3 and grpo["run_seeds"] == [0, 1, 2]  # sorted by config seed
    assert grpo["per_seed"] == [2.0, 3.0, 5.0] and round(grpo["mean"], 6) == 3.333333 and round(grpo["std"], 6) == 1.247219
    assert grpo["iqm"] == pytest.approx(10 / 3)  # 3 values: int(0.75) = 0 cut
    assert dr["per_seed"] == [0.0, 1.0, 2.0, 3.0] and dr["iqm"] == 1.5  # the middle two of four
    assert dr["ci_low"] <= 1.5 <= dr["ci_high"]
    assert (out / "curves.png").stat().st_size > 1000 and json.loads((out / "curves.json").read_text()) == got
    # labels override the config's method; the table is printed without --json
    res, _ = invoke(["compare", "curves", f"mine={runs[0]}", f"mine={runs[1]}", "--last", "3", "--out", str(out)])
    assert res.exit_code == 0 and "mine" in res.stdout and "3.5000" in res.stdout  # mean of 5 and 2


def test_compare_errors_are_one_line_exit_2(tmp_path):
    run = make_run(tmp_path, "r", "grpo", 0, [1.0])
    for args, msg in ((["curves", str(run), "--metric", "nope"], "logs no 'nope'"),
                      (["curves", str(tmp_path / "missing")], "not a covey run folder"),
                      (["adastop"], "give run folders, --scores CSV or --agent"),
                      (["passk", str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl")], "no samples file"),
                      (["matrix", "--base", str(tmp_path / "x.json"), "--row", "bad"], "NAME=FILE"),
                      (["export", str(run), "--format", "csv"], "only 'orb'")):  # fmt: skip
        res = runner.invoke(app, ["compare", *args, "--out", str(tmp_path / "o")])
        assert res.exit_code == 2 and msg in res.output and "Traceback" not in res.output, (args, res.output)


def test_adastop_from_runs_and_from_csv(tmp_path):
    runs = [make_run(tmp_path, f"a{i}", "grpo", i, [0.0, 10.0 + i]) for i in range(5)]
    runs += [make_run(tmp_path, f"b{i}", "dr_grpo", i, [0.0, float(i)]) for i in range(5)]
    res, got = invoke(["compare", "adastop", *map(str, runs), "--last", "1", "--out", str(tmp_path / "o"), "--json"])
    assert res.exit_code == 0, res.output
    assert got["decisions"] == {"grpo vs dr_grpo": "larger"} and got["interims"][0]["boundary"] == pytest.approx(7.2)
    assert (tmp_path / "o" / "adastop.png").exists()
    # adastop's CSV (index column first); C is far from A and B, A vs B needs 5 more seeds each
    path = tmp_path / "scores.csv"
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["", "A", "B", "C"])
        w.writerows([[i, i, i + 2, 20 + i] for i in range(5)])
    res = runner.invoke(app, ["compare", "adastop", "--scores", str(path), "--K", "3", "--out", str(tmp_path / "o")])
    assert res.exit_code == 0, res.output
    assert "A vs C      smaller" in res.stdout and "A vs B      continue" in res.stdout
    assert "run more seeds for A (to 10 seeds), B (to 10 seeds)" in res.stdout


def write_samples(path, counts, n=8, first_correct=True):
    """One record per sample; problem p has counts[p] correct, placed first (or last) in sample order."""
    lines = [json.dumps({"meta": {"n": n}})]
    for p, c in enumerate(counts):
        for j in range(n):
            ok = j < c if first_correct else j >= n - c
            lines.append(json.dumps({"problem_id": p, "sample": j, "seed": 0, "correct": ok, "score": float(ok), "answer": None,
                                     "length": 1, "finish": "stop", "completion": ""}))  # fmt: skip
    path.write_text("\n".join(lines) + "\n")
    return path


def test_passk_toy_study_and_coverage(tmp_path):
    base = write_samples(tmp_path / "base.jsonl", [2, 2, 1, 0])
    rl = write_samples(tmp_path / "rl.jsonl", [8, 7, 0, 0])
    res, got = invoke(["compare", "passk", str(base), str(rl), "--out", str(tmp_path / "o"), "--json"])
    assert res.exit_code == 0, res.output
    b, t = got["pass@k"]["base"], got["pass@k"]["trained"]
    assert [round(b[k - 1], 6) for k in (1, 2, 4, 8)] == [0.15625, 0.294643, 0.517857, 0.75]
    assert [round(t[k - 1], 6) for k in (1, 2, 4, 8)] == [0.46875, 0.5, 0.5, 0.5]
    assert got["crossings"] == [[3, 4]] and got["coverage"]["shrinkage"] == [2] and got["coverage"]["expansion"] == []
    assert (tmp_path / "o" / "passk.png").exists()
    # shards merge: problems 0-1 and 2-3 in two files give the same curves
    s0 = write_samples(tmp_path / "s0.jsonl", [2, 2])
    s1 = write_samples(tmp_path / "s1.jsonl", [1, 0])
    lines = s1.read_text().splitlines()
    s1.write_text("\n".join([lines[0]] + [l.replace('"problem_id": 0', '"problem_id": 2').replace('"problem_id": 1', '"problem_id": 3')
                                          for l in lines[1:]]) + "\n")  # fmt: skip
    res, again = invoke(["compare", "passk", f"{s0},{s1}", str(rl), "--out", str(tmp_path / "o"), "--json"])
    assert res.exit_code == 0 and again["pass@k"] == got["pass@k"]
    # coverage at k = 1 (first sample only): base's correct samples are last, so base reaches nothing at k=1
    late = write_samples(tmp_path / "late.jsonl", [2, 2, 1, 0], first_correct=False)
    res, cov = invoke(["compare", "coverage", str(late), str(rl), "--k", "1", "--out", str(tmp_path / "o"), "--json"])
    assert res.exit_code == 0, res.output
    assert cov["expansion"] == [0, 1] and cov["base_unsolved"] == 4 and cov["expansion_rate"] == 0.5 and cov["shrinkage"] == []
    res, cov = invoke(["compare", "coverage", str(late), str(rl), "--out", str(tmp_path / "o"), "--json"])  # k = N = 8
    assert cov["k"] == 8 and cov["preservation"] == [0, 1] and cov["shrinkage"] == [2] and cov["expansion_rate"] == 0.0
    res = runner.invoke(app, ["compare", "coverage", str(late), str(rl), "--k", "9", "--out", str(tmp_path / "o")])
    assert res.exit_code == 2 and "--k must be in 1..8" in res.output


def test_matrix_from_eval_results(tmp_path):
    def result(name, by):
        path = tmp_path / f"{name}.json"
        path.write_text("eval: 4/4 problems\n" + json.dumps({"task": "mixture", "accuracy": 0.0, "by": {d: {"accuracy": a} for d, a in by.items()}}))
        return path

    base = result("base", {"arithmetic": 0.5, "countdown": 0.25})
    a = result("a", {"arithmetic": 0.75, "countdown": 0.125})
    m = result("m", {"arithmetic": 0.625, "countdown": 0.5})
    res, got = invoke(["compare", "matrix", "--base", str(base), "--row", f"arith={a}", "--row", f"mix={m}",
                       "--out", str(tmp_path / "o"), "--json"])  # fmt: skip
    assert res.exit_code == 0, res.output
    assert got["delta"] == {"arith": {"arithmetic": 0.25, "countdown": -0.125}, "mix": {"arithmetic": 0.125, "countdown": 0.25}}
    assert (tmp_path / "o" / "matrix.png").exists()
    short = result("s", {"arithmetic": 0.75})
    res = runner.invoke(app, ["compare", "matrix", "--base", str(base), "--row", f"s={short}", "--out", str(tmp_path / "o")])
    assert res.exit_code == 2 and "countdown" in res.output


def test_export_orb_layout(tmp_path):
    done = make_run(tmp_path, "run-a", "grpo", 0, [0.5, 0.75])
    cut = make_run(tmp_path, "run-b", "grpo", 1, [0.5], steps=4)
    out = tmp_path / "orb"
    res, got = invoke(["compare", "export", str(done), str(cut), "--project", "study", "--out", str(out), "--json"])
    assert res.exit_code == 0, res.output
    assert [r["state"] for r in got["runs"]] == ["finished", "unfinished"]
    rows = list(csv.DictReader(open(out / "covey" / "study" / "run-a" / "run_df.csv")))
    assert [r["global_step"] for r in rows] == ["0", "1", "2"] and [r["reward/mean"] for r in rows] == ["", "0.5", "0.75"]
    run = json.loads((out / "covey" / "study" / "run-a" / "run.json").read_text())
    assert run["path"] == ["covey", "study", "run-a"] and run["config"]["algo"]["preset"] == "grpo"
    assert set(run["provenance"]) >= {"covey", "python", "torch", "transformers", "platform", "sha256", "packages_sha256"}


def test_adastop_trains_only_the_seeds_the_test_asks_for(tmp_path, monkeypatch):
    from covey.cli import compare

    launched = []

    def fake_train(config, seed, run_dir, overrides):  # a run whose score is set by its config and seed
        launched.append((config.stem, seed, tuple(overrides)))
        base = {"far": 20.0, "a": 0.0, "b": 2.0}[config.stem]
        make_run(run_dir.parent, run_dir.name, "grpo", seed, [0.0, base + seed % 5])

    monkeypatch.setattr(compare, "train_seed", fake_train)
    for name in ("far", "a", "b"):
        (tmp_path / f"{name}.yaml").write_text("model:\n  name: tiny-llama\n")
    args = ["compare", "adastop", *[f"--agent={m}={tmp_path / m}.yaml" for m in ("a", "b", "far")], "--runs-dir", str(tmp_path / "runs"),
            "--train-override", "steps=2", "--last", "1", "--K", "3", "--out", str(tmp_path / "o"), "--json"]  # fmt: skip
    res, got = invoke(args)
    assert res.exit_code == 0, res.output
    # interim 0 (5 seeds each): T(a, far) = 20 and T(b, far) = 18 > b_0 = 2.4, T(a, b) = 2 is not, so only a and
    # b get seeds 5..9; interim 1: T(a, b) = 4 > b_1 = 3.2 -> "smaller"
    assert got["decisions"]["a vs far"] == "smaller" and got["decisions"]["b vs far"] == "smaller"
    assert sorted(s for c, s, _ in launched if c == "far") == list(range(5))
    assert sorted(s for c, s, _ in launched if c == "a") == list(range(10)) and got["decisions"]["a vs b"] == "smaller"
    assert all(o == ("steps=2",) for _, _, o in launched) and got["seeds_given"] == {"a": 10, "b": 10, "far": 5}
    res = runner.invoke(app, ["compare", "adastop", f"--agent=a={tmp_path / 'a.yaml'}", "--agent", f"b={tmp_path / 'nope.yaml'}",
                              "--out", str(tmp_path / "o")])  # fmt: skip
    assert res.exit_code == 2 and "nope.yaml" in res.output


def test_train_seed_keeps_finished_runs_and_refuses_a_run_without_checkpoint(tmp_path):
    from covey.cli.compare import train_seed

    done = make_run(tmp_path, "done", "grpo", 0, [1.0])
    (done / "final").mkdir()
    train_seed(tmp_path / "missing.yaml", 0, done, [])  # nothing is launched (the config does not even exist)
    cut = make_run(tmp_path, "cut", "grpo", 0, [1.0])
    with pytest.raises(ValueError, match="without a checkpoint"):
        train_seed(tmp_path / "missing.yaml", 0, cut, [])


@pytest.mark.parametrize(("damage", "msg"), [
    (lambda ls: ls.__setitem__(3, ls[3].replace('"problem_id": 0, ', "")), "x.jsonl:4: 'problem_id' must be an integer"),
    (lambda ls: ls.__setitem__(2, ls[2].replace('"correct": true', '"seed": 1')), "x.jsonl:3: 'correct' must be true or false"),
    (lambda ls: ls.__setitem__(2, "[1, 2]"), "x.jsonl:3: a record must be a JSON object, got list"),
    (lambda ls: ls.__setitem__(0, '{"meta": [1]}'), "x.jsonl:1: no covey eval header line"),
    (lambda ls: ls.__setitem__(0, '{"head": {}}'), "x.jsonl:1: no covey eval header line"),
    (lambda ls: ls.__setitem__(2, "[" * 100_000 + "]" * 100_000), "x.jsonl:3: not a JSON line (RecursionError)"),
    (lambda ls: ls.__setitem__(2, ls[2].replace('"sample": 1', '"sample": null')), "x.jsonl:3: 'sample' must be an integer"),
    (lambda ls: ls.__setitem__(2, ls[2].replace('"correct": true', '"correct": "false"')),
     """x.jsonl:3: 'correct' must be true or false, got "false\""""),  # a string used to count as correct
    (lambda ls: ls.insert(3, ls[2]), "x.jsonl:4: sample 1 of problem 0 appears twice"),  # used to inflate N
])
def test_damaged_sample_files_are_one_line_errors_naming_file_and_line(tmp_path, damage, msg):
    good = write_samples(tmp_path / "good.jsonl", [2, 1], n=4)
    lines = good.read_text().splitlines()
    damage(lines)
    bad = tmp_path / "x.jsonl"
    bad.write_text("\n".join(lines) + "\n")
    for cmd in ("passk", "coverage"):
        res = runner.invoke(app, ["compare", cmd, str(bad), str(good), "--out", str(tmp_path / "o")])
        assert res.exit_code == 2 and msg in " ".join(res.output.split()) and "Traceback" not in res.output, res.output


def test_samples_of_another_task_are_not_compared(tmp_path):
    a = write_samples(tmp_path / "a.jsonl", [2, 1], n=4)
    b = write_samples(tmp_path / "b.jsonl", [2, 1], n=4)
    for path, task in ((a, "gsm8k"), (b, "math500")):
        lines = path.read_text().splitlines()
        path.write_text("\n".join([json.dumps({"meta": {"n": 4, "task": task, "split": "test"}}), *lines[1:]]) + "\n")
    res = runner.invoke(app, ["compare", "passk", str(a), str(b), "--out", str(tmp_path / "o")])
    assert res.exit_code == 2 and "different problems: task 'gsm8k'" in res.output, res.output


def _trl_run(root, name, aggregation, seed, values, kl=None):
    """A run as GRPOTrainer(args=...) writes it: no preset, advantage grpo, TRL's loss type as the aggregation."""
    run = make_run(root, name, "grpo", seed, values)
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    cfg["algo"] = {"preset": None, "advantage": {"name": "grpo"}, "aggregation": {"name": aggregation}, "kl": kl}
    cfg["log"] = {"name": name}
    (run / "config.yaml").write_text(yaml.safe_dump(cfg))
    return run


def test_curves_keep_different_algorithms_apart_though_they_share_an_advantage(tmp_path):
    # TRL loss types grpo, dr_grpo and bnpo: three methods, not "grpo, 3 seeds"
    runs = [_trl_run(tmp_path, n, agg, 0, [float(i)] * 3) for i, (n, agg) in
            enumerate([("a", "seq-mean-token-mean"), ("b", "seq-mean-token-sum-constant"), ("c", "token-mean")])]
    runs.append(_trl_run(tmp_path, "a1", "seq-mean-token-mean", 1, [4.0] * 3))  # a second seed of the first
    res, got = invoke(["compare", "curves", *map(str, runs), "--last", "1", "--out", str(tmp_path / "o"), "--json"])
    assert res.exit_code == 0, res.output
    methods = {m["method"]: m for m in got["methods"]}
    assert set(methods) == {"grpo (aggregation.name=seq-mean-token-mean)", "grpo (aggregation.name=seq-mean-token-sum-constant)",
                            "grpo (aggregation.name=token-mean)"}
    assert methods["grpo (aggregation.name=seq-mean-token-mean)"]["per_seed"] == [0.0, 4.0]
    assert got["warnings"] == []  # the log name and seed may differ within a method


def test_curves_warn_when_one_group_differs_in_more_than_the_seed(tmp_path):
    # grouped by an explicit key, runs that differ in their KL are one group: say so
    a = _trl_run(tmp_path, "a", "token-mean", 0, [1.0])
    b = _trl_run(tmp_path, "b", "token-mean", 1, [2.0], kl={"name": "k3", "coef": 0.04})
    res, got = invoke(["compare", "curves", str(a), str(b), "--group-by", "algo.advantage.name", "--last", "1",
                       "--out", str(tmp_path / "o"), "--json"])
    assert res.exit_code == 0, res.output
    assert [m["method"] for m in got["methods"]] == ["grpo"]
    (line,) = got["warnings"]
    assert "differ in more than the seed: algo.kl.coef: a=null, b=0.04; algo.kl.name: a=null, b=k3;" in line
    assert "warning: runs grouped as 'grpo'" in res.stderr
    # the same runs by their algorithm are two methods, and nothing to warn about
    res, got = invoke(["compare", "curves", str(a), str(b), "--last", "1", "--out", str(tmp_path / "o"), "--json"])
    assert len(got["methods"]) == 2 and got["warnings"] == []
