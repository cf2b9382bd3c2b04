"""`covey compare`: studies over finished runs and eval sample files (trained only when asked: `adastop --agent`, `matrix STUDY.yaml`).

Each sub-command prints a table (``--json``: the JSON instead) and writes ``<command>.json`` and
``<command>.png`` (export: the ORB files) into ``--out`` (default ``covey-compare``). A run is given
as ``PATH`` (its method = its resolved ``algo:`` block, or the config key ``--group-by``) or ``LABEL=PATH``;
runs grouped together that differ in more than the seed are named in a warning.
The math lives in `covey.eval.stats`, `covey.eval.passk` and `covey.eval.adastop`; the figures in
`covey.eval.plots`. Bad input raises ValueError / FileNotFoundError before any work (exit 2).
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
import sys
from pathlib import Path
from typing import Annotated, Optional

import numpy as np
import typer
import yaml

from covey.eval import plots
from covey.eval.adastop import adastop
from covey.eval.passk import coverage, crossings, mean_pass_curve
from covey.eval.samples import correct_counts, read_samples
from covey.eval.stats import bootstrap_ci, interpolate_curves, iqm, last_n_mean, mean_std, transfer_matrix

Out = Annotated[Path, typer.Option(help="Folder for <command>.json and <command>.png.")]
AsJson = Annotated[bool, typer.Option("--json", help="Print JSON instead of the table.")]
Runs = Annotated[list[str], typer.Argument(help="Run folders, each PATH or LABEL=PATH.")]
GroupBy = Annotated[str, typer.Option(help="What names a run's method when it has no LABEL=: algo (its whole resolved "
                                             "algo block) or a dotted config key (e.g. sampling.temperature).")]


# ---------------------------------------------------------------- inputs


def _config_value(cfg: dict, key: str):
    value = cfg
    for part in key.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def load_runs(specs: list[str], metric: str, group_by: str = "algo") -> list[dict]:
    """Each run: {label, path, seed, steps, values, config} of `metric` (rows that log it).

    A run given as LABEL=PATH keeps its label. Otherwise `group_by` names its method: "algo" (the
    default) groups runs by their whole resolved `algo:` block (`_algo_labels`), any other dotted
    config key by that key's value."""
    runs = []
    for spec in specs:
        label, _, path = spec.partition("=") if "=" in spec and not Path(spec).exists() else ("", "", spec)
        path = Path(path)
        if not (path / "metrics.jsonl").is_file() or not (path / "config.yaml").is_file():
            raise FileNotFoundError(f"{path} is not a covey run folder (needs config.yaml and metrics.jsonl)")
        cfg = yaml.safe_load((path / "config.yaml").read_text()) or {}
        from covey.train.metrics import read_metrics

        rows = [r for r in read_metrics(path / "metrics.jsonl") if metric in r and r[metric] is not None]
        if not rows:
            keys = sorted({k for r in read_metrics(path / "metrics.jsonl") for k in r} - {"step"})
            raise ValueError(f"{path} logs no {metric!r}; it has: {', '.join(keys[:20])}{' ...' if len(keys) > 20 else ''}")
        if not label and group_by != "algo":
            value = _config_value(cfg, group_by)
            if value is None:
                raise ValueError(f"{path}: config has no {group_by!r}; give the run as LABEL={path}")
            label = str(value)
        runs.append({"label": label, "path": str(path), "seed": cfg.get("seed"), "config": cfg,
                     "steps": [r["step"] for r in rows], "values": [float(r[metric]) for r in rows]})  # fmt: skip
    _algo_labels([r for r in runs if not r["label"]])
    return runs


def _flat(d, prefix: str = "") -> dict:
    out: dict = {}
    for k, v in (d or {}).items():
        if isinstance(v, dict) and v:
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _algo_labels(runs: list[dict]) -> None:
    """Label runs by their resolved algorithm: runs with equal `algo:` blocks share a label, runs that
    differ never do. The label is the preset (else the advantage's name), and where two different
    blocks would get the same one, the keys in which they differ (`grpo (aggregation.name=token-mean)`):
    three runs of TRL's loss types grpo, dr_grpo and bnpo are three methods, not one with three seeds."""
    blocks = {r["path"]: _flat({k: v for k, v in (r["config"].get("algo") or {}).items() if k != "preset"}) for r in runs}
    base = {}
    for r in runs:
        algo = r["config"].get("algo") or {}
        base[r["path"]] = str(algo.get("preset") or _config_value(r["config"], "algo.advantage.name") or "custom")
    for name in set(base.values()):
        members = [r for r in runs if base[r["path"]] == name]
        distinct = {json.dumps(blocks[r["path"]], sort_keys=True, default=str) for r in members}
        differing = sorted({k for r in members for k in blocks[r["path"]]
                            if len({json.dumps(blocks[o["path"]].get(k), default=str) for o in members}) > 1})  # fmt: skip
        for r in members:
            if len(distinct) == 1:
                r["label"] = name
                continue
            shown = [f"{k}={_short_value(blocks[r['path']].get(k), None)}" for k in differing]  # whole: labels stay distinct
            r["label"] = f"{name} ({', '.join(shown)})"


def _short_value(v, width: int | None = 24) -> str:
    text = "null" if v is None else json.dumps(v, default=str) if isinstance(v, (list, dict)) else str(v)
    return text if width is None or len(text) <= width else text[: width - 3] + "..."


# Keys that may differ between the seeds of one method: where and how a run is written, its speed knobs.
_NOT_METHOD = ("seed", "log.", "checkpoint.", "threads", "reward_workers", "task_reward_timeout_s", "runtime.timeout_s")


def _groups(runs: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for r in runs:
        out.setdefault(r["label"], []).append(r)
    for rs in out.values():
        rs.sort(key=lambda r: (r["seed"] is None, r["seed"] if r["seed"] is not None else 0, r["path"]))
    return out


def group_warnings(groups: dict[str, list[dict]]) -> list[str]:
    """One line per group whose runs differ in more than the seed (and `_NOT_METHOD`): the keys and,
    for the first few, each run's value. Printed on stderr and kept in the result JSON."""
    lines = []
    for name, rs in groups.items():
        flats = [_flat(r["config"]) for r in rs]
        keys = sorted({k for f in flats for k in f if not k.startswith(_NOT_METHOD)})
        differ = [k for k in keys if len({json.dumps(f.get(k), sort_keys=True, default=str) for f in flats}) > 1]
        if differ:
            detail = "; ".join(f"{k}: " + ", ".join(f"{Path(r['path']).name}={_short_value(f.get(k))}" for r, f in zip(rs[:3], flats))
                               for k in differ[:3])  # fmt: skip
            more = f" (and {len(differ) - 3} more keys)" if len(differ) > 3 else ""
            lines.append(f"runs grouped as {name!r} differ in more than the seed: {detail}{more}; label them "
                         "LABEL=PATH or pick --group-by to keep them apart")  # fmt: skip
    return lines


def _warn(lines: list[str]) -> None:
    for line in lines:
        typer.echo(f"warning: {line}", err=True)


def _last_json(path: Path) -> dict:
    """The last JSON object line of a file (e.g. `covey eval ... > res.json` with progress on stderr)."""
    if not path.is_file():
        raise FileNotFoundError(f"no eval result file {path}")
    for line in reversed(path.read_text().splitlines()):
        if line.strip().startswith("{"):
            return json.loads(line)
    raise ValueError(f"{path} holds no JSON result line (the stdout of `covey eval`)")


def _files(spec: str) -> list[Path]:
    return [Path(p) for p in spec.split(",") if p]


# ---------------------------------------------------------------- output


def table(headers: list[str], rows: list[list]) -> str:
    def cell(v):
        if isinstance(v, float):
            return "nan" if math.isnan(v) else f"{v:.4f}"
        return str(v)

    cells = [[cell(v) for v in r] for r in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(headers)]
    line = lambda r: "  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip()  # noqa: E731
    return "\n".join([line(headers), line(["-" * w for w in widths])] + [line(r) for r in cells])


def _emit(out: Path, name: str, result: dict, text: str, as_json: bool, draw) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(result, indent=1, default=float) + "\n")
    png = draw(out / f"{name}.png")
    typer.echo(json.dumps(result, default=float) if as_json else text)
    typer.echo(f"wrote {out / f'{name}.json'} and {png}", err=True)


# ---------------------------------------------------------------- commands


def curves_cmd(
    runs: Runs,
    metric: Annotated[str, typer.Option(help="A metrics.jsonl key.")] = "reward/mean",
    last: Annotated[int, typer.Option(help="Per seed: the mean of the last N logged values.")] = 10,
    group_by: GroupBy = "algo",
    reps: Annotated[int, typer.Option(help="Bootstrap resamples for the IQM's CI.")] = 2000,
    seed: Annotated[int, typer.Option(help="Bootstrap seed.")] = 0,
    out: Out = Path("covey-compare"),
    as_json: AsJson = False,
):
    """Open RL Benchmark table per method: last-N mean per seed, mean ± std (population) over seeds,
    IQM with a 95% percentile-bootstrap CI; PNG: interpolated curves (mean ± std) and per-seed values."""
    if last < 1 or reps < 1:
        raise ValueError(f"--last and --reps must be >= 1, got {last}, {reps}")
    groups = _groups(load_runs(runs, metric, group_by))
    warned = group_warnings(groups)
    _warn(warned)
    rows, curves = [], {}
    for name, rs in groups.items():
        per_seed = [last_n_mean(r["values"], last) for r in rs]
        m, s = mean_std(per_seed)
        lo, hi = bootstrap_ci(per_seed, reps=reps, seed=seed)
        rows.append({"method": name, "seeds": len(rs), "mean": m, "std": s, "iqm": iqm(per_seed), "ci_low": lo, "ci_high": hi,
                     "per_seed": per_seed, "runs": [r["path"] for r in rs], "run_seeds": [r["seed"] for r in rs]})  # fmt: skip
        curves[name] = interpolate_curves([(r["steps"], r["values"]) for r in rs])
    result = {"metric": metric, "last": last, "std": "population (ddof=0)", "ci": f"95% percentile bootstrap, {reps} reps, seed {seed}",
              "methods": rows, "warnings": warned}  # fmt: skip
    text = table(["method", "seeds", "mean", "std", "IQM", "CI low", "CI high"],
                 [[r["method"], r["seeds"], r["mean"], r["std"], r["iqm"], r["ci_low"], r["ci_high"]] for r in rows])  # fmt: skip
    _emit(out, "curves", result, f"{metric}, last {last} per seed\n{text}", as_json, lambda p: plots.curves_png(p, metric, curves, rows))


def _pass_sets(a: str, b: str) -> tuple[dict, dict, dict, dict]:
    meta_a, recs_a = read_samples(_files(a))
    meta_b, recs_b = read_samples(_files(b))
    for key in ("task", "params", "split", "limit"):  # the models and sampling may differ; the problems may not
        if meta_a.get(key) != meta_b.get(key):
            raise ValueError(f"the two sample sets are of different problems: {key} {meta_a.get(key)!r} in {a}, "
                             f"{meta_b.get(key)!r} in {b}")  # fmt: skip
    if set(recs_a) != set(recs_b):
        only = sorted(set(recs_a) ^ set(recs_b))
        raise ValueError(f"the two sample sets cover different problems (e.g. ids {only[:5]}); evaluate the same problems")
    return meta_a, recs_a, meta_b, recs_b


def passk_cmd(
    a: Annotated[str, typer.Argument(help="Samples file(s) of model A (base), comma-separated shards.")],
    b: Annotated[str, typer.Argument(help="Samples file(s) of model B (trained), comma-separated shards.")],
    labels: Annotated[str, typer.Option(help="Names of A and B.")] = "base,trained",
    out: Out = Path("covey-compare"),
    as_json: AsJson = False,
):
    """pass@k for every k <= N of two `covey eval --samples-out` files, the k where the curves cross,
    and the coverage sets at each file's N (solved by at least one sample)."""
    names = labels.split(",")
    if len(names) != 2 or len(set(names)) != 2:
        raise ValueError(f"--labels needs two different names, got {labels!r}")
    _, recs_a, _, recs_b = _pass_sets(a, b)
    ca, cb = correct_counts(recs_a), correct_counts(recs_b)
    curve_a, curve_b = mean_pass_curve(ca.values()), mean_pass_curve(cb.values())
    common = min(len(curve_a), len(curve_b))
    ks = sorted({1 << e for e in range(common.bit_length()) if 1 << e <= common} | {common})
    cross = crossings(curve_b, curve_a, range(1, common + 1))
    cov = coverage({p: c for p, (_, c) in ca.items()}, {p: c for p, (_, c) in cb.items()})
    result = {"labels": names, "problems": len(ca), "samples": [len(curve_a), len(curve_b)],
              "pass@k": {names[0]: curve_a.tolist(), names[1]: curve_b.tolist()},
              "crossings": [list(c) for c in cross], "coverage": cov}  # fmt: skip
    text = table(["k", names[0], names[1], f"{names[1]} - {names[0]}"],
                 [[k, float(curve_a[k - 1]), float(curve_b[k - 1]), float(curve_b[k - 1] - curve_a[k - 1])] for k in ks])  # fmt: skip
    where = ", ".join(f"between k={lo} and k={hi}" for lo, hi in cross) or "nowhere"
    text += (f"\ncurves cross: {where}\ncoverage over {cov['problems']} problems: preserved {len(cov['preservation'])}, "
             f"expansion {len(cov['expansion'])}, shrinkage {len(cov['shrinkage'])}")  # fmt: skip
    _emit(out, "passk", result, text, as_json, lambda p: plots.passk_png(p, dict(zip(names, (curve_a, curve_b))), cross))


def coverage_cmd(
    base: Annotated[str, typer.Argument(help="Samples file(s) of the base model, comma-separated shards.")],
    post: Annotated[str, typer.Argument(help="Samples file(s) of the trained model.")],
    k: Annotated[Optional[int], typer.Option(help="Use the first k samples of each problem (default: all, the smaller N).")] = None,
    out: Out = Path("covey-compare"),
    as_json: AsJson = False,
):
    """MATH-Beyond-style sets at k: expansion (solved by post, not base), shrinkage, preservation, and
    the expansion rate = |expansion| / |problems base never solves at k|."""
    _, recs_b, _, recs_p = _pass_sets(base, post)
    n_min = min(min(len(r) for r in recs_b.values()), min(len(r) for r in recs_p.values()))
    k = n_min if k is None else k
    if not 1 <= k <= n_min:
        raise ValueError(f"--k must be in 1..{n_min} (the fewest samples of a problem in either file), got {k}")
    first = lambda recs: {p: sum(1 for r in sorted(rs, key=lambda r: r["sample"])[:k] if r["correct"]) for p, rs in recs.items()}  # noqa: E731
    cov = coverage(first(recs_b), first(recs_p))
    result = {"k": k, **cov}
    counts = {"preserved": len(cov["preservation"]), "expansion": len(cov["expansion"]), "shrinkage": len(cov["shrinkage"]),
              "neither": cov["problems"] - len(cov["preservation"]) - len(cov["expansion"]) - len(cov["shrinkage"])}  # fmt: skip
    text = table(["k", "problems", "base unsolved", "preserved", "expansion", "shrinkage", "expansion rate"],
                 [[k, cov["problems"], cov["base_unsolved"], counts["preserved"], counts["expansion"], counts["shrinkage"],
                   cov["expansion_rate"]]])  # fmt: skip
    _emit(out, "coverage", result, text, as_json, lambda p: plots.coverage_png(p, counts, k))


def _csv_scores(path: Path) -> dict[str, list[float]]:
    """adastop's CSV (`pd.read_csv(file, index_col=0)` in its CLI): the first column is the index,
    then one column per agent, one row per seed."""
    if not path.is_file():
        raise FileNotFoundError(f"no scores file {path}")
    rows = list(csv.reader(path.read_text().splitlines()))
    if len(rows) < 2:
        raise ValueError(f"{path} needs a header of agent names and at least one row of scores")
    head, skip = rows[0], 1
    if len(head) < 3:
        raise ValueError(f"{path}: need an index column and at least two agent columns, got header {head}")
    scores: dict[str, list[float]] = {h: [] for h in head[skip:]}
    for line, row in enumerate(rows[1:], 2):
        for h, v in zip(head[skip:], row[skip:]):
            if v.strip():
                try:
                    scores[h].append(float(v))
                except ValueError:
                    raise ValueError(f"{path}:{line}: {v!r} is not a number") from None
    return scores


def train_seed(config: Path, seed: int, run_dir: Path, overrides: list[str]) -> None:
    """`covey train CONFIG seed=SEED --run-dir RUN_DIR` in a subprocess; a finished run (with
    `final/`) is kept, a killed one resumed from its latest checkpoint (one without any is refused)."""
    import subprocess

    from covey.train.checkpoint import latest_checkpoint

    if (run_dir / "final").is_dir():
        return
    cmd = [sys.executable, "-m", "covey.cli", "train"]
    if latest_checkpoint(run_dir) is not None:
        cmd += ["--resume", str(run_dir)]
    elif run_dir.exists():
        raise ValueError(f"{run_dir} holds an unfinished run without a checkpoint to resume; remove it to train that seed again")
    else:
        cmd += [str(config), *overrides, f"seed={seed}", "--run-dir", str(run_dir)]
    typer.echo(f"adastop: {' '.join(cmd[3:])}", err=True)
    done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        raise ValueError(f"covey train failed for {run_dir} (exit {done.returncode}): {done.stderr.strip()[-2000:]}")


def _orchestrate(agents: dict[str, Path], runs_dir: Path, overrides: list[str], metric: str, last: int, test) -> tuple[dict, dict]:
    """Train seeds 0, 1, ... of each method as AdaStop asks for them (only methods in an undecided
    comparison), until every comparison is decided or the K interims are spent. The run folders
    (RUNS_DIR/NAME-seedS) are the state: running it again reuses finished runs and resumes killed ones."""
    scores: dict[str, list[float]] = {a: [] for a in agents}

    def collect(name: str, upto: int) -> None:
        for seed in range(len(scores[name]), upto):
            run = runs_dir / f"{name}-seed{seed}"
            train_seed(agents[name], seed, run, overrides)
            scores[name].append(last_n_mean(load_runs([f"{name}={run}"], metric)[0]["values"], last))

    res = test(scores)
    for name in agents:  # the first interim needs n seeds of everyone
        collect(name, res["need_more"].get(name, len(scores[name])))
    while True:
        res = test(scores)
        if not res["need_more"]:
            return scores, res
        for name, upto in res["need_more"].items():
            collect(name, upto)


def adastop_cmd(
    runs: Annotated[Optional[list[str]], typer.Argument(help="Run folders (PATH or LABEL=PATH); a run's score = the "
                                                               "last-N mean of --metric; seeds in config-seed order.")] = None,  # fmt: skip
    scores: Annotated[Optional[Path], typer.Option(help="Or a CSV of scores as adastop's CLI reads it (an index column, "
                                                        "then a column per method).")] = None,  # fmt: skip
    agent: Annotated[Optional[list[str]], typer.Option(help="Or NAME=CONFIG.yaml (repeatable): train seeds 0, 1, ... of each "
                                                            "method with `covey train` as the test asks for them.")] = None,  # fmt: skip
    runs_dir: Annotated[Path, typer.Option(help="With --agent: where the runs go (NAME-seedS; reused when run again).")] = Path("runs/adastop"),
    train_override: Annotated[Optional[list[str]], typer.Option(help="With --agent: a key=value override for every run (repeatable).")] = None,
    metric: Annotated[str, typer.Option(help="A metrics.jsonl key (with run folders).")] = "reward/mean",
    last: Annotated[int, typer.Option(help="Per run: the mean of the last N logged values of --metric.")] = 10,
    group_by: GroupBy = "algo",
    n: Annotated[int, typer.Option(help="Seeds per method per interim.")] = 5,
    interims: Annotated[int, typer.Option("--K", help="Most interims.")] = 5,
    permutations: Annotated[int, typer.Option("--B", help="Permutations.")] = 10000,
    alpha: Annotated[float, typer.Option(help="Family-wise level.")] = 0.05,
    beta: Annotated[float, typer.Option(help="Power spent on early accept (0 = off).")] = 0.0,
    seed: Annotated[int, typer.Option(help="Seed of the random permutations.")] = 0,
    compare_to_first: Annotated[bool, typer.Option(help="Compare every method to the first only.")] = False,
    out: Out = Path("covey-compare"),
    as_json: AsJson = False,
):
    """AdaStop's sequential permutation test over per-seed scores: decides each pair (larger, smaller,
    equal) or says which methods need more seeds (n more each) for the next interim."""
    if sum(x is not None and x != [] for x in (runs, scores, agent)) != 1:
        raise ValueError("give run folders, --scores CSV or --agent NAME=CONFIG (one of them)")
    if last < 1:
        raise ValueError(f"--last must be >= 1, got {last}")
    def test(sc: dict) -> dict:
        return adastop(sc, n=n, K=interims, B=permutations, alpha=alpha, beta=beta, seed=seed, compare_to_first=compare_to_first)

    warned: list[str] = []
    if agent:
        from covey.train.config import load_config

        configs: dict[str, Path] = {}
        for spec in agent:
            name, sep, path = spec.partition("=")
            if not sep or not name or not path or name in configs:
                raise ValueError(f"--agent must be NAME=CONFIG.yaml with distinct names, got {spec!r}")
            load_config(Path(path), list(train_override or []))  # a bad config fails here, before any training
            configs[name] = Path(path)
        test(dict.fromkeys(configs, []))  # the test's parameters are checked before any training
        by_method, res = _orchestrate(configs, runs_dir, list(train_override or []), metric, last, test)
    elif scores is not None:
        by_method = _csv_scores(scores)
        res = test(by_method)
    else:
        groups = _groups(load_runs(runs, metric, group_by))
        warned = group_warnings(groups)
        _warn(warned)
        by_method = {m: [last_n_mean(r["values"], last) for r in rs] for m, rs in groups.items()}
        res = test(by_method)
    means = {m: float(np.mean(v)) if v else float("nan") for m, v in by_method.items()}
    result = {"n": n, "K": interims, "B": permutations, "alpha": alpha, "beta": beta, "seed": seed, "means": means,
              "seeds_given": {m: len(v) for m, v in by_method.items()}, "warnings": warned, **res}  # fmt: skip
    text = table(["comparison", "decision"], [[c, d] for c, d in res["decisions"].items()])
    text += "\n" + table(["method", "seeds given", "seeds used", "mean"],
                         [[m, len(by_method[m]), res["n_iters"][m], means[m]] for m in by_method])  # fmt: skip
    if res["need_more"]:
        text += "\nundecided: run more seeds for " + ", ".join(f"{m} (to {s} seeds)" for m, s in res["need_more"].items())
    elif res["finished"]:
        text += f"\nall comparisons decided after {len(res['interims'])} interim(s)"
    _emit(out, "adastop", result, text, as_json, lambda p: plots.adastop_png(p, res["interims"]))


def _domain_values(files: list[tuple[Path, str | None]], metric: str, what: str) -> dict[str, float]:
    """{eval domain: metric} from eval result files: a result with a per-subset split (`--by`) gives one
    domain per subset, else one named `name` (default the result's task)."""
    got: dict[str, float] = {}
    for f, name in files:
        res = _last_json(f)
        cells = {k: v for k, v in res.get("by", {}).items()} or {name or str(res.get("task", f.stem)): res}
        for dom, vals in cells.items():
            if metric not in vals:
                raise ValueError(f"{f}: no {metric!r} for {dom!r} (has {', '.join(sorted(k for k in vals if k != 'by'))})")
            if dom in got:
                raise ValueError(f"eval domain {dom!r} appears twice in {what}")
            got[dom] = float(vals[metric])
    return got


def matrix_cmd(
    study: Annotated[Optional[Path], typer.Argument(help="STUDY.yaml: train its configs and evaluate base and runs on its tasks first (covey.cli.study).")] = None,
    base: Annotated[Optional[str], typer.Option(help="Eval result file(s) of the base model (comma-separated): `covey eval` stdout.")] = None,
    row: Annotated[Optional[list[str]], typer.Option(help="NAME=FILE[,FILE...]: eval results of a model trained on NAME (repeatable).")] = None,
    metric: Annotated[str, typer.Option(help="The eval metric to compare.")] = "accuracy",
    out: Out = Path("covey-compare"),
    as_json: AsJson = False,
):
    """Transfer matrix Δ[trained on, eval domain] = metric(trained) − metric(base). A result with a
    per-subset split (`covey eval --by domain`) gives one column per subset, else one per task (with a
    STUDY.yaml: per study column). With STUDY.yaml the runs and evals it names are made first (reused
    when already there); else --base and --row name existing result files."""
    if study is not None:
        from covey.cli.study import load_study, run_study

        if base is not None or row:
            raise ValueError("give a STUDY.yaml or --base/--row, not both")
        plan = load_study(study)
        base_files, row_files = run_study(plan, log=lambda m: typer.echo(m, err=True))
        cols = list(plan["columns"])
        base_vals = _domain_values(list(zip(base_files, cols)), metric, "base")
        rows = {name: _domain_values(list(zip(files, cols)), metric, name) for name, files in row_files.items()}
    else:
        if base is None or not row:
            raise ValueError("matrix needs a STUDY.yaml, or --base and at least one --row")
        rows = {}
        for spec in row:
            name, sep, files = spec.partition("=")
            if not sep or not name or not files:
                raise ValueError(f"--row must be NAME=FILE[,FILE...], got {spec!r}")
            rows[name] = _domain_values([(f, None) for f in _files(files)], metric, spec)
        base_vals = _domain_values([(f, None) for f in _files(base)], metric, base)
    delta = transfer_matrix(base_vals, rows)
    result = {"metric": metric, "base": base_vals, "trained": rows, "delta": delta}
    cols = list(base_vals)
    text = table(["trained on", *cols], [[r, *[delta[r][c] for c in cols]] for r in delta])
    text = f"Δ {metric} vs base ({', '.join(f'{c} {v:.4f}' for c, v in base_vals.items())})\n{text}"
    _emit(out, "matrix", result, text, as_json, lambda p: plots.matrix_png(p, delta, metric))


def _provenance() -> dict:
    import importlib.metadata as md

    from covey.train.provenance import environment

    freeze = sorted(f"{d.metadata['Name']}=={d.version}" for d in md.distributions() if d.metadata["Name"])
    return {"recorded": "at export (the exporting environment, not necessarily the training one)", **environment(),
            "packages_sha256": hashlib.sha256("\n".join(freeze).encode()).hexdigest()}  # fmt: skip


def _run_provenance(run: Path, exporting: dict) -> dict:
    """The run's own RUN/provenance.json (written when training started) with the exporting
    environment under ``export``; a run without one (or with an unreadable one): the exporting environment."""
    from covey.train.provenance import FILE

    try:
        recorded = json.loads((run / FILE).read_text())
    except (OSError, ValueError):
        return exporting
    if not isinstance(recorded, dict):
        return exporting
    return {"recorded": "at train time (the run's provenance.json)", **recorded, "export": exporting}


def export_cmd(
    runs: Annotated[list[str], typer.Argument(help="Run folders to export.")],
    format: Annotated[str, typer.Option("--format", help="orb: the Open RL Benchmark cache layout.")] = "orb",
    project: Annotated[str, typer.Option(help="ORB project name (the folder under the entity).")] = "covey",
    entity: Annotated[str, typer.Option(help="ORB entity name.")] = "covey",
    out: Out = Path("covey-compare"),
    as_json: AsJson = False,
):
    """Write each run as ``OUT/ENTITY/PROJECT/RUN_ID/run_df.csv`` (its metrics history, one row per
    logged step) + ``run.json`` (id, name, state, config, tags, path, provenance), ORB's cache layout."""
    if format != "orb":
        raise ValueError(f"--format: only 'orb' is supported, got {format!r}")
    paths = [Path(r) for r in runs]
    for p in paths:
        if not (p / "metrics.jsonl").is_file() or not (p / "config.yaml").is_file():
            raise FileNotFoundError(f"{p} is not a covey run folder (needs config.yaml and metrics.jsonl)")
    ids = [p.resolve().name for p in paths]
    if len(set(ids)) != len(ids):
        raise ValueError(f"two runs share a folder name (the ORB run id): {sorted(i for i in ids if ids.count(i) > 1)}")
    prov = _provenance()
    done = []
    for p, rid in zip(paths, ids):
        from covey.train.metrics import read_metrics

        rows = read_metrics(p / "metrics.jsonl")
        cfg = yaml.safe_load((p / "config.yaml").read_text()) or {}
        cols = ["_step", "global_step", *sorted({k for r in rows for k in r} - {"step"})]
        dest = out / entity / project / rid
        dest.mkdir(parents=True, exist_ok=True)
        with open(dest / "run_df.csv", "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(cols)
            for i, r in enumerate(rows):
                w.writerow([i, r.get("step", i), *[r.get(c, "") for c in cols[2:]]])
        last_step = max((r.get("step", 0) for r in rows), default=0)
        state = "finished" if last_step >= int(cfg.get("steps") or 0) else "unfinished"
        digests = {n: hashlib.sha256((p / n).read_bytes()).hexdigest() for n in ("config.yaml", "metrics.jsonl")}
        run = {"id": rid, "name": rid, "state": state, "url": None, "project": project, "entity": entity, "config": cfg,
               "tags": [f"covey-{prov['covey']}"], "path": [entity, project, rid], "user": None,
               "provenance": {**_run_provenance(p, prov), "source": str(p.resolve()), "sha256": digests}}  # fmt: skip
        (dest / "run.json").write_text(json.dumps(run, indent=1, default=str) + "\n")
        done.append({"run": str(p), "id": rid, "rows": len(rows), "columns": len(cols), "state": state, "dir": str(dest)})
    result = {"format": "orb", "runs": done}
    typer.echo(json.dumps(result) if as_json else table(["run id", "rows", "columns", "state", "written to"],
                                                        [[d["id"], d["rows"], d["columns"], d["state"], d["dir"]] for d in done]))  # fmt: skip


COMMANDS = {"curves": curves_cmd, "passk": passk_cmd, "coverage": coverage_cmd, "adastop": adastop_cmd, "matrix": matrix_cmd,
            "export": export_cmd}  # fmt: skip
"""Sub-command name -> function; `covey.cli` registers them on its `compare` group."""
