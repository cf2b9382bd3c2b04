"""`covey` command line: train, eval, compare, sft, plot, list (algos, tasks), config, bench, models."""

from __future__ import annotations

import errno
import functools
import json
import math
import os
from pathlib import Path
from typing import Annotated, Optional

import typer

_DEBUG = {"on": False}  # set per invocation by the --debug option or COVEY_DEBUG=1


def _env_debug() -> bool:
    return os.environ.get("COVEY_DEBUG", "").strip().lower() not in ("", "0", "false", "no")


def _user_errors() -> tuple[type[BaseException], ...]:
    """Exceptions that mean "your input is wrong" (a message, exit 2), not "covey has a bug" (traceback)."""
    from pydantic import ValidationError

    from covey.registry import RegistryError
    from covey.rewards.runner import RewardFailure
    from covey.runtime.ray_actors import RayActorFailed
    from covey.runtime.thread import GenerationFailed
    from covey.train.checkpoint import WriteError
    from covey.train.config import ConfigError
    from covey.train.runlock import RunLocked

    return (ConfigError, RegistryError, ValidationError, FileNotFoundError, FileExistsError,
            NotADirectoryError, PermissionError, WriteError, RunLocked, RewardFailure, GenerationFailed,
            RayActorFailed)  # fmt: skip


_COVEY_SRC = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # src/covey/


# A file covey was told to use cannot be written (read-only file system, no permission, full disk or
# quota, file too large): the run folder's or an output's, not a bug.
_FILE_ERRNOS = frozenset({errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOSPC, errno.EDQUOT, errno.EFBIG,
                          errno.ENOTDIR, errno.EISDIR, errno.ENAMETOOLONG, errno.ELOOP, errno.EEXIST})


def _file_error(e: BaseException) -> bool:
    return isinstance(e, OSError) and bool(e.filename) and e.errno in _FILE_ERRNOS


def _message(e: BaseException) -> str:
    """The one line printed for a user error: a file error names the file and the cause."""
    from covey.train.checkpoint import WriteError

    if _file_error(e) and not isinstance(e, WriteError):  # a WriteError words its own message
        reason = os.strerror(e.errno).lower()
        if e.errno in (errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
            return f"cannot write {e.filename}: {reason}"
        return f"{e.filename}: {reason}"
    return str(e).strip() or type(e).__name__


def _is_user_error(e: BaseException) -> bool:
    """A user-error type above, a file covey cannot write (`_FILE_ERRNOS`), or a ValueError that covey
    raised on purpose: a covey error class (RolloutsError, a task's ...) or a plain ValueError raised
    in covey's own code (where covey checks its inputs). A ValueError from inside torch, transformers,
    json, ... is a bug: traceback."""
    if isinstance(e, _user_errors()) or _file_error(e):
        return True
    if not isinstance(e, ValueError):
        return False
    if type(e).__module__.split(".")[0] == "covey":
        return True
    tb = e.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and os.path.abspath(tb.tb_frame.f_code.co_filename).startswith(_COVEY_SRC)


class _Typer(typer.Typer):
    """Every command turns user errors into `error: <message>` and exit code 2 (`--debug`: traceback)."""

    def command(self, *args, **kwargs):
        register = super().command(*args, **kwargs)

        def deco(fn):
            @functools.wraps(fn)
            def run(*a, **kw):
                try:
                    return fn(*a, **kw)
                except Exception as e:
                    if _DEBUG["on"] or _env_debug() or not _is_user_error(e):
                        raise
                    msg = _message(e)
                    typer.secho(f"error: {msg}", fg="red", err=True)
                    typer.secho("(run with --debug or COVEY_DEBUG=1 for the traceback)", err=True)
                    raise typer.Exit(2) from None

            return register(run)

        return deco


app = _Typer(help="covey: group-relative RL for language models.", no_args_is_help=True, add_completion=False)
config_app = _Typer(help="Inspect configurations.", no_args_is_help=True)
bench_app = _Typer(help="Benchmarks that print one JSON line with covey vs a baseline.", no_args_is_help=True)
models_app = _Typer(help="Model aliases and their one-time preparation.", no_args_is_help=True)
app.add_typer(config_app, name="config")
app.add_typer(bench_app, name="bench")
app.add_typer(models_app, name="models")
compare_app = _Typer(help="Studies over runs and eval samples: curves, passk, coverage, adastop, matrix, export.", no_args_is_help=True)
app.add_typer(compare_app, name="compare")


@app.callback()
def _options(debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks of user errors too.")] = False):
    """covey: group-relative RL for language models."""
    _DEBUG["on"] = debug or _env_debug()  # per invocation: an earlier --debug in this process does not stick


def _fail(msg: str) -> None:
    typer.secho(f"error: {msg}", fg="red", err=True)
    raise typer.Exit(2)


def _check_at_least(flag: str, value: int, low: int, note: str = "") -> None:
    if value < low:
        _fail(f"{flag} must be >= {low}{f' ({note})' if note else ''}, got {value}")


def _check_seed(seed: int) -> None:
    if not 0 <= seed < 2**32:
        _fail(f"--seed must be in 0..{2**32 - 1}, got {seed}")


@app.command()
def train(
    config: Annotated[Optional[Path], typer.Argument(help="YAML config (see examples/).")] = None,
    overrides: Annotated[Optional[list[str]], typer.Argument(help="key=value overrides, e.g. algo=dapo rollout.group_size=4")] = None,
    resume: Annotated[Optional[Path], typer.Option(help="Continue the run in this folder from its latest checkpoint.")] = None,
    run_dir: Annotated[Optional[Path], typer.Option(help="Where to write the run (default: log.dir/log.name).")] = None,
):
    """Train a policy with the configured algorithm. Ctrl-C or SIGTERM stops at the next safe point of the
    step and saves a checkpoint of the last completed step (exit code 130 / 143); a second one exits at once."""
    from covey.models.loading import check_name
    from covey.train.config import load_config, resume_config

    config, overrides = _split_config_arg(config, overrides)
    if resume is not None:
        if config is not None:
            _fail("give either CONFIG or --resume RUN_DIR, not both (a resumed run uses its saved config)")
        cfg = resume_config(resume, overrides)  # only safe keys may change
    else:
        cfg = load_config(config, overrides)  # no CONFIG: defaults + overrides
    check_name(cfg.model.name)  # an unknown model fails before a run folder is made
    # The training stack (transformers' model code, the learner, the engines) is imported only now, so a
    # refused config or an unknown model is one line in about 2 s, not 4-5.
    from covey.train.run import default_run_dir, train as run_training

    out = resume if resume is not None else run_dir or default_run_dir(cfg)
    _interruptible(lambda: run_training(cfg, out, resume=resume is not None))


def _interruptible(work) -> None:
    """Run `work()` and print its summary; stopped by Ctrl-C / SIGTERM (after saving: `TrainingInterrupted`),
    print what it saved and exit with 128 + the signal (130 for Ctrl-C, 143 for SIGTERM)."""
    from covey.train.interrupt import TrainingInterrupted

    try:
        summary = work()
    except TrainingInterrupted as e:
        typer.echo(json.dumps({**e.summary, "interrupted": True}))
        raise typer.Exit(128 + int(e.signum)) from None
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    typer.echo(json.dumps(summary))


def _split_config_arg(config: Optional[Path], overrides: Optional[list[str]]) -> tuple[Optional[Path], list[str]]:
    """`covey train key=value ...` without a YAML: the first argument is an override, not a path."""
    overrides = list(overrides or [])
    if config is not None and "=" in str(config) and not config.exists():
        return None, [str(config)] + overrides
    return config, overrides


@config_app.command("show")
def config_show(
    config: Annotated[Optional[Path], typer.Argument(help="YAML config.")] = None,
    overrides: Annotated[Optional[list[str]], typer.Argument(help="key=value overrides.")] = None,
):
    """Print the fully resolved configuration (preset expanded, defaults filled); exit 2 when
    `covey train` would refuse it (the same checks, and the model name resolves, nothing loaded)."""
    import yaml

    from covey.models.loading import check_name
    from covey.train.config import load_config
    from covey.train.setup import check_run

    config, overrides = _split_config_arg(config, overrides)
    cfg = load_config(config, overrides)
    check_run(cfg)  # everything `covey train` checks before loading the model
    check_name(cfg.model.name)  # an alias, a model folder, a cached hub id, or the hub is reachable
    typer.echo(yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False))


@app.command("plan")
def plan_cmd(
    config: Annotated[Optional[Path], typer.Argument(help="YAML config (as for covey train).")] = None,
    overrides: Annotated[Optional[list[str]], typer.Argument(help="key=value overrides, e.g. runtime.sharding=fsdp2")] = None,
    prompt_tokens: Annotated[int, typer.Option(help="Tokens per prompt to plan for.")] = 256,
    device_memory_gb: Annotated[Optional[float], typer.Option(help="GiB per device (default: this machine's CUDA device's, else 80).")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the plan as one JSON object.")] = False,
):
    """Memory per device of the learner and engine pools, from the config and the model's config.json
    (no weights loaded): weights, gradients, optimizer state, activations, KV cache; fits or not."""
    from covey.plan import plan_config, render

    config, overrides = _split_config_arg(config, overrides)
    plan = plan_config(config, overrides, prompt_tokens=prompt_tokens, device_memory_gb=device_memory_gb)
    if json_out:
        typer.echo(json.dumps(plan.to_json()))
    else:
        render(plan)


def _catalogue() -> list[tuple[str, str, list[tuple[str, str, str, str, str]]]]:
    """(kind, config key, rows of (name, summary, paper/arXiv, parameters)) for every registry and
    preset table, in the order a config file reads."""
    from covey.algos import REGISTRIES
    from covey.algos.presets import PRESET_NOTES, PRESETS, SAMPLER_PRESETS
    from covey.engine import ENGINES
    from covey.envs import ENVS
    from covey.preference import PAIRS, PREFERENCE_LOSSES
    from covey.train.sft_losses import SFT_LOSSES
    from covey.rewards import REWARDS
    from covey.samplers import SAMPLERS
    from covey.strategies import STRATEGIES
    from covey.tasks import TASKS

    def rows(registry):
        out = []
        for name in sorted(registry):
            e = registry[name]
            paper = ", ".join(x for x in (e.paper, f"arXiv {e.arxiv}" if e.arxiv else "") if x)
            params = ", ".join(f"{k}={_short(v)}" for k, v in e.defaults.items())
            out.append((name, e.summary, paper, params, _declared(e.caps)))
        return out

    kinds = [("task", "task", rows(TASKS)), ("reward", "rewards", rows(REWARDS)), ("sampler", "sampler", rows(SAMPLERS)),
             ("sampler preset", "sampler", [(n, p["about"], "", "", "") for n, p in sorted(SAMPLER_PRESETS.items())]),
             ("strategy", "rollout.strategy", rows(STRATEGIES)), ("environment", "env", rows(ENVS)),
             ("engine", "engine", rows(ENGINES))]  # fmt: skip
    kinds += [(axis, "algo.regularizers" if axis == "regularizer" else f"algo.{axis}", rows(registry))
              for axis, registry in REGISTRIES.items()]
    from covey.likelihood import LIKELIHOODS

    kinds.append(("likelihood", "algo.likelihood", rows(LIKELIHOODS)))  # masked-diffusion models (docs/diffusion.md)
    from covey.objectives import OBJECTIVES  # importing it registers the built-in objectives

    kinds.append(("objective", "algo.objective", rows(OBJECTIVES)))  # training modes with their own update
    kinds.append(("preset", "algo.preset", [(n, PRESET_NOTES.get(n, ""), "", "", "") for n in sorted(PRESETS)]))
    kinds += [("preference loss", "preference.loss", rows(PREFERENCE_LOSSES)), ("pair builder", "preference.pairs", rows(PAIRS)),
              ("sft loss", "covey sft --loss", rows(SFT_LOSSES))]
    return kinds


def _short(value, width: int = 24) -> str:
    text = repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."


def _declared(caps) -> str:
    """A registry entry's declared capabilities (those that differ from the defaults), e.g.
    ``engine_protocols=(ForkingEngine), provides=(tree_path)``; a declared function shows as ``fn``."""

    def plain(v) -> str:
        if isinstance(v, type):
            return v.__name__
        if isinstance(v, tuple):
            return "(" + ", ".join(plain(x) for x in v) + ")"
        return "fn" if callable(v) else str(v)

    return ", ".join(f"{k}={plain(v)}" for k, v in caps.declared().items())


ALGO_KINDS = ("advantage", "surrogate", "aggregation", "kl", "correction", "regularizer", "likelihood", "preset")


@app.command("list")
def list_cmd(kinds: Annotated[Optional[list[str]], typer.Argument(help="Only these kinds (e.g. sampler advantage preset).")] = None):
    """Every registry: tasks, rewards, samplers (and sampler presets), rollout strategies, engines, each
    algorithm axis and the algorithm presets, one line per entry with its summary and paper."""
    from rich.console import Console
    from rich.table import Table

    catalogue = _catalogue()
    known = [k for k, _, _ in catalogue]
    unknown = sorted(set(kinds or ()) - set(known))
    if unknown:
        _fail(f"unknown kind(s) {unknown}; kinds: {', '.join(known)}")
    table = Table("kind (config key)", "name", "summary", "paper", "parameters (defaults)", "declares")
    for kind, key, entries in catalogue:
        if kinds and kind not in kinds:
            continue
        for name, summary, paper, params, declares in entries:
            table.add_row(f"{kind} ({key})", name, summary, paper, params, declares)
    Console(width=220).print(table)


@app.command()
def algos():
    """Every algorithm component per axis and every preset: arXiv id, status (checked against the
    authors' code, a framework, partly, or reconstructed; `covey.algos.status`), the code checked, and
    the parameters with their defaults."""
    from rich.console import Console
    from rich.table import Table

    from covey.algos.status import STATUS_MEANING, status_of

    table = Table("kind (config key)", "name", "arXiv", "status", "checked against", "parameters (defaults)")
    for kind, key, entries in _catalogue():
        if kind not in ALGO_KINDS:
            continue
        arxiv = _arxiv_ids(kind)
        for name, _summary, _paper, params, _declares in entries:
            status, source = status_of(kind, name)
            table.add_row(f"{kind} ({key})", name, arxiv.get(name, ""), status, source, params)
    Console(width=220).print(table)
    typer.echo("status: " + "; ".join(f"{k} = {v}" for k, v in STATUS_MEANING.items()))


def _arxiv_ids(kind: str) -> dict[str, str]:
    """{name: arXiv id} of one algorithm kind (presets: the id in their note, if any)."""
    import re

    from covey.algos import REGISTRIES
    from covey.algos.presets import PRESET_NOTES

    if kind in REGISTRIES:
        return {n: REGISTRIES[kind][n].arxiv for n in REGISTRIES[kind]}
    if kind == "likelihood":
        from covey.likelihood import LIKELIHOODS

        return {n: LIKELIHOODS[n].arxiv for n in LIKELIHOODS}
    return {n: m.group(1) for n, note in PRESET_NOTES.items() if (m := re.search(r"arXiv (\d{4}\.\d{4,5})", note))}


@app.command()
def tasks():
    """List the built-in tasks and their answer formats."""
    from covey.tasks import TASKS

    for name in sorted(TASKS):
        typer.echo(f"{name}: {TASKS[name].summary}")


@app.command("eval")
def eval_cmd(
    task: Annotated[Optional[str], typer.Option(help="A registered task (covey tasks); with --run, default: the run's task.")] = None,
    model: Annotated[Optional[str], typer.Option(help="Model alias, folder or hub id.")] = None,
    run: Annotated[Optional[Path], typer.Option(help="A training run folder: evaluate its latest checkpoint with its task "
                                                     "settings and rewards.")] = None,  # fmt: skip
    split: Annotated[Optional[str], typer.Option(help="Split to evaluate (default: test; with --run the run's task.eval_split).")] = None,
    limit: Annotated[int, typer.Option(help="Evaluate the first N problems (0 = all).")] = 0,
    n: Annotated[int, typer.Option(help="Samples per problem.")] = 1,
    k: Annotated[str, typer.Option(help="Comma-separated k values for pass@k / maj@k (each <= n), or pow2 (1, 2, 4, ..., n).")] = "1",
    temperature: Annotated[float, typer.Option(help="0 = greedy.")] = 0.0,
    top_p: Annotated[float, typer.Option(help="Nucleus sampling mass (1.0 = off; the Limits-of-RLVR study uses 0.95).")] = 1.0,
    samples_out: Annotated[Optional[Path], typer.Option(help="Write one JSON line per sample here; an existing file "
                                                             "resumes (its finished problems are skipped).")] = None,  # fmt: skip
    shard: Annotated[Optional[str], typer.Option(help="i/m: evaluate only the problems with index % m == i.")] = None,
    by: Annotated[Optional[str], typer.Option(help="An item column: also report the metrics per value of it.")] = None,
    batch_prompts: Annotated[int, typer.Option(help="Problems sampled together (and written together with --samples-out).")] = 64,
    logprob_under: Annotated[Optional[str], typer.Option(help="A model (alias, folder): also the per-token NLL and "
                                                              "perplexity of the samples under it.")] = None,  # fmt: skip
    max_new_tokens: int = 256,
    dtype: Annotated[Optional[str], typer.Option(help="bf16, fp32 or auto (bf16 on CUDA; on CPU whichever a quick matmul "
                                                      "finds faster); default bf16, with --run the run's model.dtype.")] = None,  # fmt: skip
    device: Annotated[str, typer.Option(help="cpu, cuda, cuda:N or auto (CUDA when present).")] = "auto",
    task_param: Annotated[Optional[list[str]], typer.Option(help="Task parameter key=value (repeatable; with --run, "
                                                                 "overrides the run's).")] = None,  # fmt: skip
    seed: int = 0,
):
    """Accuracy, unbiased pass@k and maj@k of a model or a run's checkpoint on a task (with --run
    also the mean of each of the run's reward columns)."""
    from covey.devices import resolve_device
    from covey.engine import TorchEngine
    from covey.engine.support import check_model_support
    from covey.eval.options import parse_ks, parse_shard
    from covey.eval.runner import eval_progress, evaluate
    from covey.tasks import get_task
    from covey.train.config import load_config, parse_overrides
    from covey.train.setup import build_rewards, load_policy, load_run_policy

    if (model is None) == (run is None):
        _fail("give exactly one of --model or --run")
    _check_at_least("--limit", limit, 0, "0 = all")
    _check_at_least("--n", n, 1)
    _check_at_least("--max-new-tokens", max_new_tokens, 1)
    _check_seed(seed)
    try:
        ks = parse_ks(k, n)
        shard_i, shard_m = parse_shard(shard)
        if not 0.0 < top_p <= 1.0:
            raise ValueError(f"--top-p must be in (0, 1], got {top_p}")
        if batch_prompts < 1:
            raise ValueError(f"--batch-prompts must be >= 1, got {batch_prompts}")
    except ValueError as e:
        _fail(str(e))
    if not (math.isfinite(temperature) and temperature >= 0):
        _fail(f"--temperature must be a finite number >= 0 (0 = greedy), got {temperature}")
    from covey.dtypes import CHOICES as DTYPES

    if dtype is not None and dtype not in DTYPES:
        _fail(f"--dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    try:
        dev = resolve_device(device)
    except ValueError as e:
        _fail(str(e))
    run_cfg = None
    if run is not None:
        if not (run / "config.yaml").is_file():
            _fail(f"{run} is not a covey run folder (no config.yaml)")
        run_cfg = load_config(run / "config.yaml")
        from covey.train.provenance import python_only

        if (why := python_only(run)) is not None:
            typer.secho(f"warning: {run} was started from Python and not everything is recorded ({why}); "
                        "evaluating with what its config holds", fg="yellow", err=True)  # fmt: skip
    elif task is None:
        _fail("--task is needed with --model (with --run the run's task is the default)")
    same_task = run_cfg is not None and task in (None, run_cfg.task.name)
    name = run_cfg.task.name if same_task else task
    params = {**(run_cfg.task.params if same_task else {}), **parse_overrides(task_param or [])}
    split = split or (run_cfg.task.eval_split if same_task else "test")
    if model is not None:
        from covey.models.loading import check_name

        check_name(model)  # an unknown model fails before anything loads
    try:
        t = get_task(name, **params)
        items = list(t.examples(split))
    except (ValueError, FileNotFoundError) as e:
        _fail(str(e))
    items = items[:limit] if limit else items
    ids = [i for i in range(len(items)) if i % shard_m == shard_i]
    items = [items[i] for i in ids]
    if by is not None and any(by not in it for it in items):
        _fail(f"--by {by!r} is not a column of every {name} item (columns: {', '.join(sorted(items[0])) if items else 'none'})")
    meta = {"task": name, "params": params, "split": split, "model": model or str(run), "limit": limit, "n": n,
            "temperature": temperature, "top_p": top_p, "max_new_tokens": max_new_tokens, "seed": seed,
            "shard": f"{shard_i}/{shard_m}", **({"logprob_under": logprob_under} if logprob_under else {})}  # fmt: skip
    if samples_out is not None:
        from covey.eval.samples import open_samples

        open_samples(samples_out, meta, n)  # a mismatched or broken file fails here, before anything loads
    for m in (model, logprob_under):
        if m is not None:
            check_model_support(m, "torch")  # from its config.json, before anything loads
    rewards = build_rewards(run_cfg, t, workers=run_cfg.reward_workers) if same_task else None  # the run's columns
    from covey.tasks.base import hooks_of

    if rewards is None and hooks_of(t).reward is None:
        _fail(f"task {name!r} has no verifier to score with (for `dataset`: give rows an answer column, see answer_key)")
    if samples_out is not None and rewards is not None and "accuracy" not in rewards.names:
        rewards.close()
        _fail("--samples-out needs a correctness source: the run's rewards have no accuracy column")
    try:
        if run is not None:
            policy, tokenizer = load_run_policy(run)
        else:
            from covey.train.config import ModelConfig

            policy, tokenizer = load_policy(ModelConfig(name=model))
        try:
            engine = TorchEngine(policy.to(dev), dtype=dtype or (run_cfg.model.dtype if run_cfg else "bf16"), tokenizer=tokenizer)
        except ValueError as e:
            _fail(str(e))
        nll_under = None
        if logprob_under is not None:
            from covey.eval.crossppl import nll_scorer
            from covey.train.config import ModelConfig

            scorer, scorer_tok = load_policy(ModelConfig(name=logprob_under))
            nll_under = nll_scorer(scorer.to(dev), scorer_tok)
        with eval_progress(len(items), label="eval") as progress:
            res = evaluate(engine, tokenizer, t, items, n=n, ks=ks, temperature=temperature, top_p=top_p,
                           max_new_tokens=max_new_tokens, seed=seed, rewards=rewards, progress=progress, ids=ids,
                           samples_out=samples_out, meta=meta, by=by, batch_prompts=batch_prompts,
                           nll_under=nll_under)  # fmt: skip
    finally:
        if rewards is not None:
            rewards.close()
    extra = {"shard": meta["shard"]} if shard else {}
    typer.echo(json.dumps({"task": name, "model": model or str(run), "split": split, **extra, **res}))


@app.command()
def sft(
    model: Annotated[str, typer.Option(help="Model alias or folder to start from.")],
    task: Annotated[str, typer.Option(help="Task whose demonstrations to imitate.")],
    out: Annotated[Path, typer.Option(help="Folder to write the fine-tuned model into.")],
    steps: int = 200,
    batch_size: int = 32,
    lr: float = 1e-3,
    task_param: Annotated[Optional[list[str]], typer.Option(help="Task parameter key=value (repeatable).")] = None,
    seed: int = 0,
    loss: Annotated[str, typer.Option(help="SFT loss: ce (cross-entropy; a masked-diffusion model: LLaDA's masked-token loss) or otr (One-Token Rollout, causal models).")] = "ce",
    loss_param: Annotated[Optional[list[str]], typer.Option(help="SFT loss parameter key=value (repeatable), e.g. k=8.")] = None,
):
    """A short supervised warm start on task demonstrations (for tiny models before RL). Progress and ETA on
    stderr; Ctrl-C saves the model so far and exits with 130."""
    from covey.models.loading import check_name
    from covey.tasks import get_task
    from covey.train.config import parse_overrides
    from covey.train.sft import check_sft_args, check_sft_loss

    try:
        check_sft_args(steps, batch_size, lr, seed)
    except ValueError as e:
        _fail(f"--{str(e).replace('_', '-')}")
    if out.exists() and not out.is_dir():
        _fail(f"--out {out} exists and is not a folder")
    from covey.train.sft_losses import SFT_LOSSES

    loss_params = parse_overrides(loss_param or [])
    try:
        SFT_LOSSES.get(loss).validate_params(loss_params)
    except ValueError as e:
        _fail(f"--loss: {e}")
    t = get_task(task, **parse_overrides(task_param or []))
    from covey.tasks.base import hooks_of

    if hooks_of(t).demonstration is None:
        _fail(f"task {task!r} has no demonstrations (a `demonstration(item)` method) to imitate")
    t.examples("train")  # the data loads
    check_name(model)  # an unknown model fails before anything loads
    try:
        check_sft_loss(model, loss)
    except ValueError as e:
        _fail(str(e))
    from covey.train.sft import sft_with_progress

    _interruptible(lambda: sft_with_progress(model, t, out, steps=steps, batch_size=batch_size, lr=lr, seed=seed, loss=loss,
                                             loss_params=loss_params))  # fmt: skip


@app.command()
def export(
    run_dir: Annotated[Path, typer.Argument(help="A training run folder.")],
    merge: Annotated[bool, typer.Option(help="LoRA runs: also write the adapters merged into final/.")] = False,
    out: Annotated[Optional[Path], typer.Option(help="Write final/ and adapter/ here (default: the run folder).")] = None,
):
    """Write the run's latest checkpoint as standard folders: final/ (save_pretrained model +
    tokenizer) for full fine-tuning, adapter/ (peft) for LoRA runs (with --merge also final/)."""
    from covey.train.export import export_run

    try:
        typer.echo(json.dumps(export_run(run_dir, merge=merge, out=out)))
    except (FileNotFoundError, ValueError) as e:
        _fail(str(e))


@app.command()
def plot(run_dir: Annotated[Path, typer.Argument(help="A run folder with metrics.jsonl.")]):
    """Write PNG charts (reward/accuracy, length, KL/entropy, time split) into RUN_DIR/plots/."""
    from covey.train.plots import plot_run

    try:
        for p in plot_run(run_dir):
            typer.echo(str(p))
    except (FileNotFoundError, ValueError) as e:
        _fail(str(e))


@bench_app.command("generate")
def bench_generate(
    model: str = "tiny-llama",
    batch: int = 64,
    prompt_tokens: int = 32,
    new_tokens: int = 64,
    dtype: Annotated[str, typer.Option(help="bf16, fp32, auto (measured on CPU), or both (a pair per dtype).")] = "bf16",
    repeats: int = 3,
    threads: Annotated[int, typer.Option(help="torch threads for both engines (0 = torch's default).")] = 0,
    device: Annotated[str, typer.Option(help="cpu, cuda, cuda:N or auto (CUDA when present).")] = "auto",
    hf_static: Annotated[str, typer.Option(help='also time HF with cache_implementation="static": auto (CUDA only), yes, no.')] = "auto",
    hf_static_budget: Annotated[float, typer.Option(help="seconds for the HF static runs (warm-up included); past it they are skipped, and the result says so.")] = 120.0,
):
    """covey's engine vs HF generate on the same model, prompts and settings (tokens/s and ratio)."""
    from covey.bench.generate import generate_cmd

    generate_cmd(model=model, batch=batch, prompt_tokens=prompt_tokens, new_tokens=new_tokens, dtype=dtype,
                 repeats=repeats, threads=threads, device=device, hf_static=hf_static,
                 hf_static_budget_s=hf_static_budget)  # fmt: skip


@bench_app.command("step-vs-trl")
def bench_step_vs_trl(
    model: str = "tiny-llama",
    steps: Annotated[int, typer.Option(help="Timed steps per framework (after one warm-up step).")] = 3,
    prompts: int = 8,
    group_size: int = 8,
    new_tokens: int = 24,
    threads: Annotated[int, typer.Option(help="torch threads for both (0 = torch's default; 1 is steadier on a shared machine).")] = 0,
    device: Annotated[str, typer.Option(help="cpu, cuda, cuda:N or auto (CUDA when present).")] = "auto",
    dtypes: Annotated[str, typer.Option(help="Comma-separated: one TRL-vs-covey pair per dtype (bf16, fp32).")] = "bf16,fp32",
):
    """TRL GRPOTrainer vs covey, same model/settings, median s/step and first-step losses."""
    from covey.dtypes import check_pair_dtypes
    from covey.bench.trl import step_vs_trl

    try:  # checked before anything loads
        names = check_pair_dtypes((d.strip() for d in dtypes.split(",") if d.strip()), "--dtypes")
    except ValueError as e:
        _fail(str(e))
    result = step_vs_trl(model, steps=steps, prompts=prompts, group_size=group_size, new_tokens=new_tokens,
                         dtypes=names, threads=threads, device=device)  # fmt: skip
    typer.echo(json.dumps(result))


@models_app.command("prepare")
def models_prepare(
    alias: Annotated[Optional[str], typer.Argument(help="A built-in alias (default smollm2-135m-instruct).")] = None,
    alias_option: Annotated[Optional[str], typer.Option("--alias", help="The same, as an option.")] = None,
):
    """Convert a built-in alias into its cached HF folder (once; later loads are fast)."""
    from covey.models import prepare
    from covey.models.convert import ALIAS_SOURCES

    if alias and alias_option and alias != alias_option:
        _fail(f"two different aliases given: {alias!r} and --alias {alias_option!r}")
    name = alias or alias_option or "smollm2-135m-instruct"
    if name not in ALIAS_SOURCES:
        _fail(f"unknown alias {name!r}; aliases that need preparing: {', '.join(sorted(ALIAS_SOURCES))}")
    typer.echo(str(prepare(name)))


def _register_compare() -> None:
    from covey.cli.compare import COMMANDS

    for name, fn in COMMANDS.items():
        compare_app.command(name)(fn)


_register_compare()


def main() -> None:  # pragma: no cover
    app(prog_name="covey")
