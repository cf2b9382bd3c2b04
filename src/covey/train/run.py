"""`covey train`: a Trainer driven with a progress bar, held-out eval before/after, Ctrl-C safety."""

from __future__ import annotations

import os
import time
from pathlib import Path

import yaml
from rich.console import Console
from rich.table import Table
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from covey.eval.episodes import evaluate_episodes
from covey.eval.runner import clock, eval_progress, evaluate
from covey.train.checkpoint import checkpoint_step, latest_checkpoint, write_error
from covey.tasks.base import hooks_of
from covey.train.config import RunConfig
from covey.train.export import export_model
from covey.train.plots import plot_run
from covey.train.interrupt import StopRequested, TrainingInterrupted, signal_name, stop_signals
from covey.train.notices import StepNotes, filter_text, scoring_text
from covey.train.provenance import python_only, write_provenance
from covey.train.threads import cpu_view
from covey.train.trainer import Trainer

__all__ = ["default_run_dir", "resume_hint", "start_lines", "step_line", "train"]

console = Console()
SAMPLES_FILE = "samples.jsonl"


def default_run_dir(cfg: RunConfig) -> Path:
    method = cfg.preference.loss.name if cfg.preference is not None else cfg.algo.preset or "custom"
    name = cfg.log.name or f"{cfg.task.name}-{method}-{time.strftime('%Y%m%d-%H%M%S')}"
    return Path(cfg.log.dir) / name


def _eval_episodes(cfg: RunConfig):
    """The episode strategy the held-out eval plays (the run's, with its `env:`), or None without an env."""
    if cfg.env is None or not cfg.eval.size:
        return None
    from covey.strategies import STRATEGIES

    spec = cfg.env_strategy()
    return STRATEGIES.build(spec.name, spec.params)


def train(cfg: RunConfig, run_dir: Path, *, resume: bool = False, trainer: Trainer | None = None) -> dict:
    """Train to `cfg.steps`; returns a summary (eval before/after, paths, the last step's metrics).

    `trainer`: an already built `Trainer` for this config and folder (the Python API builds it
    with model/dataset/reward objects); by default one is built from the config.

    Ctrl-C / SIGTERM (`covey.train.interrupt`): the first stops the step at its next safe point (or
    after it), saves a checkpoint of the last completed step and raises `TrainingInterrupted` (a
    KeyboardInterrupt carrying the summary); a second exits at once, keeping the checkpoints there are."""
    if trainer is None and not resume and (run_dir / "metrics.jsonl").exists():  # a given trainer already opened it
        raise FileExistsError(f"{run_dir} already holds a run: resume it with --resume {run_dir}, or pick another log.name")
    run_dir.mkdir(parents=True, exist_ok=True)
    _say(f"run folder: {run_dir}")  # before the model loads
    trainer = trainer or Trainer(cfg, run_dir, resume=resume)  # holds the folder's lock from here on
    try:
        _write_config(run_dir, cfg)  # on resume too: the safe overrides given (steps=...) hold for later resumes
        write_provenance(run_dir, cfg.model_dump(mode="json"), resume=resume)
    except BaseException:
        trainer.close()
        raise
    summary: dict = {"run_dir": str(run_dir), "compute": _compute(trainer)}
    for line in start_lines(cfg, trainer, run_dir, resume=resume):
        _say(line)
    eval_items = list(trainer.task.examples(cfg.task.eval_split))[: cfg.eval.size] if cfg.eval.size else []
    max_eval_tokens = cfg.eval.max_new_tokens or cfg.sampling.max_new_tokens

    episodes = _eval_episodes(cfg)  # with an env, the held-out eval plays episodes (covey.eval.episodes)

    def held_out(live: bool = True) -> float:  # live=False inside the training bar (one live display at a time)
        with trainer.paused(), eval_progress(len(eval_items), console=console, label="held-out eval", live=live and cfg.log.progress) as advance:
            if episodes is not None:
                return evaluate_episodes(trainer.engine, trainer.tokenizer, episodes, eval_items, max_new_tokens=max_eval_tokens,
                                         progress=advance)["accuracy"]  # fmt: skip
            return evaluate(trainer.engine, trainer.tokenizer, trainer.task, eval_items, max_new_tokens=max_eval_tokens,
                            progress=advance)["accuracy"]  # fmt: skip

    def on_first(signum: int) -> None:
        trainer.stop.request()  # the inline loop stops at the step's next safe point
        where = "stopping at the next safe point of this step" if trainer.stops_mid_step else "finishing this step"
        console.print(f"[yellow]{signal_name(signum)}: {where}, then saving a checkpoint of the last completed step "
                      "(send it again to exit at once)[/]", soft_wrap=True)  # fmt: skip

    columns = [TextColumn("[bold]step"), MofNCompleteColumn(), BarColumn(), TextColumn("{task.fields[info]}"),
               TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn()]  # fmt: skip
    notes, in_step = StepNotes(), None  # in_step: the step number a running step started from
    with stop_signals(on_first) as stop:
        try:
            if eval_items and trainer.step_num == 0:
                summary["eval_before"] = held_out()
                console.print(f"held-out accuracy before training: [bold]{summary['eval_before']:.1%}[/] ({len(eval_items)} prompts, greedy)")
                trainer.logger.log(0, {"eval/accuracy": summary["eval_before"]})
            elif eval_items and (before := _eval_before(run_dir)) is not None:  # resumed: the first process measured it
                summary["eval_before"] = before
            live = cfg.log.progress and console.is_terminal  # not a terminal (a log file, CI): plain lines
            started, first_step = time.perf_counter(), trainer.step_num
            with Progress(*columns, console=console, disable=not live) as progress:
                bar = progress.add_task("train", total=cfg.steps, completed=trainer.step_num, info="")
                while trainer.step_num < cfg.steps and stop["signum"] is None:
                    in_step = trainer.step_num
                    try:
                        m = trainer.step()
                    except StopRequested:
                        break  # abandoned at a safe point and rewound: the last completed step is saved below
                    in_step = None
                    if eval_items and cfg.eval.every and trainer.step_num % cfg.eval.every == 0:
                        m["eval/accuracy"] = held_out(live=False)
                        trainer.logger.log(trainer.step_num, {"eval/accuracy": m["eval/accuracy"]})
                    if trainer.last_samples:
                        console.print(_samples_table(trainer.step_num, trainer.last_samples))
                    changed = trainer.threads.apply()  # threads: auto re-checks the free cores between steps
                    lines = notes.observe(trainer.step_num, m, cpu=lambda: trainer.threads.view or cpu_view(),
                                          threads=_threads_note(cfg.threads))  # fmt: skip
                    progress.update(bar, completed=trainer.step_num, info=_info(m))
                    if not live:
                        elapsed = time.perf_counter() - started
                        print(step_line(trainer.step_num, cfg.steps, m, elapsed, trainer.step_num - first_step), flush=True)
                    for line in lines + ([changed] if changed else []):
                        _say(line)
            if eval_items and stop["signum"] is None:
                summary["eval_after"] = held_out()
                trainer.logger.log(trainer.step_num, {"eval/accuracy": summary["eval_after"]})
        except KeyboardInterrupt:
            if not stop["aborted"]:
                raise
            trainer.close()  # the second signal: no new checkpoint
            kept = latest_checkpoint(run_dir)
            _say(f"aborted in step {trainer.step_num + 1}; " + (f"the last checkpoint is {kept.name}" if kept else "no checkpoint was written"))
            raise TrainingInterrupted({**summary, "step": trainer.step_num, "checkpoint": str(kept) if kept else None,
                                       "aborted": True}, stop["signum"]) from None  # fmt: skip
        finally:
            if not stop["aborted"]:
                try:
                    if in_step is None or trainer.step_num != in_step or trainer.rewound:
                        summary["checkpoint"] = _save_done(trainer, run_dir)
                    else:
                        summary["checkpoint"] = _save_mid_step(trainer, run_dir)
                finally:
                    trainer.close()
    summary.update(notes.summary())
    summary["step"] = trainer.step_num
    if stop["signum"] is not None:
        _say(f"stopped at step {trainer.step_num}; resume with:")
        _say(resume_hint(run_dir))
        raise TrainingInterrupted(summary, stop["signum"])
    for line in notes.closing_lines():
        _say(line)
    if "eval_after" in summary:
        delta = summary["eval_after"] - summary.get("eval_before", float("nan"))
        change = f" (change {delta:+.1%})" if delta == delta else ""  # nan: no accuracy before training was measured
        console.print(f"held-out accuracy after training: [bold]{summary['eval_after']:.1%}[/]{change}")
    summary.update(export_model(trainer.model, trainer.tokenizer, run_dir))  # final/ (+ adapter/ for LoRA)
    plots = plot_run(run_dir)
    summary["plots"] = [str(p) for p in plots]
    _say(f"metrics: {run_dir / 'metrics.jsonl'}")  # one path per line: a terminal never wraps a path in two
    _say(f"plots: {run_dir / 'plots'}")
    return summary


def _say(line: str) -> None:
    """A plain line on the console: no markup, and a long path is never wrapped in the middle."""
    console.print(line, markup=False, highlight=False, soft_wrap=True)


def _threads_note(setting) -> str:
    import torch

    if setting == "auto":
        return f"threads: auto re-checks the free cores between steps (now {torch.get_num_threads()})"
    return f"threads={setting} is fixed: threads=auto (the default) follows the free cores, threads=1 is steadiest"


def _eval_before(run_dir: Path) -> float | None:
    """The held-out accuracy logged at step 0 by the run's first process (a resume does not measure it again)."""
    from covey.train.metrics import read_metrics

    path = run_dir / "metrics.jsonl"
    rows = read_metrics(path) if path.is_file() else []
    return next((float(r["eval/accuracy"]) for r in rows if r.get("step") == 0 and r.get("eval/accuracy") is not None), None)


def resume_hint(run_dir: Path) -> str:
    """The command that resumes this run: the CLI's, or for a run started from Python whose data or rewards
    the CLI cannot rebuild (`covey.train.provenance.python_only`), the Python call."""
    why = python_only(run_dir)
    if why is None:
        return f"  covey train --resume {run_dir}"
    return (f"  GRPOTrainer(<the same arguments>, run_dir={str(run_dir)!r}).train(resume_from_checkpoint=True)\n"
            f"  (from Python only: {why})")


def _save_done(trainer: Trainer, run_dir: Path) -> str:
    """A checkpoint of the last completed step: the one there is when a periodic save already wrote it."""
    done = latest_checkpoint(run_dir)
    if trainer.rewound and done is not None and checkpoint_step(done) == trainer.step_num:
        console.print(f"[yellow]step {trainer.step_num + 1} was stopped before it changed the policy; kept checkpoint {done.name}[/]")
        return str(done)
    return str(trainer.save())


def _save_mid_step(trainer: Trainer, run_dir: Path) -> str:
    """A step ended by an error after its first optimizer step (earlier, the trainer rewinds it): its
    update may be half applied. An exact checkpoint of the step it started from is kept as it is;
    without one, the state is saved anyway (better than losing the run), with a warning."""
    done = latest_checkpoint(run_dir)
    if done is not None and checkpoint_step(done) == trainer.step_num:
        console.print(f"[yellow]step {trainer.step_num + 1} was cut short; kept checkpoint {done.name}[/]")
        return str(done)
    console.print(f"[yellow]step {trainer.step_num + 1} was cut short: saving its partial state as step {trainer.step_num} "
                  "(a resume continues from it, not bit-exactly as an uninterrupted run)[/]")  # fmt: skip
    return str(trainer.save())


def _write_config(run_dir: Path, cfg: RunConfig) -> None:
    """RUN/config.yaml, replaced atomically (a kill never leaves half a config to resume from)."""
    path, tmp = run_dir / "config.yaml", run_dir / ".config.yaml.tmp"
    try:
        tmp.write_text(yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False))
        os.replace(tmp, path)
    except OSError as e:
        raise write_error(path, e) from None


def start_lines(cfg: RunConfig, trainer: Trainer, run_dir: Path, *, resume: bool = False) -> list[str]:
    """What a run says once its model is loaded (the run folder is printed before): where and in
    which dtypes it computes (and why), and each reward column with where it comes from."""
    dt = trainer.dtypes()
    lines = [f"resuming {run_dir} at step {trainer.step_num}"] if resume else []
    learner = f"learner {dt['learner']} (model.dtype {cfg.model.dtype})"
    set_engine = cfg.engine.params.get("dtype")
    if "engine" not in dt:
        engine = f"engine {cfg.engine.name}"
    elif set_engine in (None, "auto"):
        engine = f"engine {dt['engine']} (engine.dtype {set_engine or 'unset'}: follows the learner)"
    else:
        engine = f"engine {dt['engine']} (engine.dtype {set_engine})"
    lines.append(f"compute: {trainer.device}, {learner}, {engine}")
    for name, weight in zip(trainer.rewards.names, trainer.rewards.weights.tolist()):
        lines.append(f"reward {name} (weight {weight:g}): {_reward_origin(cfg, trainer.task, name)}")
    return lines


def _reward_origin(cfg: RunConfig, task, name: str) -> str:
    """Where a reward column comes from, for the start lines."""
    hooks = hooks_of(task)
    if name != "accuracy" or hooks.reward is None or any(r.alias == name or r.name == name for r in cfg.rewards):
        return "configured in rewards"
    return hooks.reward_origin or f"the verifier of task {cfg.task.name!r}"


def step_line(step: int, total: int, m: dict, elapsed: float, done_here: int) -> str:
    """The plain per-step line (off a terminal): the step's numbers, time since this process began
    training, and the ETA from the mean time of the `done_here` steps this process ran."""
    eta = elapsed / done_here * (total - step) if done_here > 0 else float("nan")
    return f"step {step}/{total} | {_info(m)} | elapsed {clock(elapsed)} | ETA {clock(eta)}"


def _compute(trainer: Trainer) -> dict[str, str]:
    """Where the run computes and in which dtypes (what `dtype: auto` chose on this machine)."""
    return {"device": str(trainer.device), "engine": "n/a", **trainer.dtypes()}


def _info(m: dict) -> str:
    parts = [f"reward {m.get('reward/mean', float('nan')):.3f}"]
    if "reward/accuracy/mean" in m:
        parts.append(f"acc {m['reward/accuracy/mean']:.2f}")
    parts += [t for t in (filter_text(m), scoring_text(m)) if t]  # dynamic sampling's outcome, slow scoring
    if "throughput/gen_tokens_per_s" in m:
        parts.append(f"{m['throughput/gen_tokens_per_s']:.0f} tok/s")
    parts.append(f"{m.get('time/step', 0):.1f}s/step")
    return " | ".join(parts)


def _samples_table(step: int, rows: list[dict]) -> Table:
    """A few sample completions with their rewards (texts cut to fit a line)."""
    table = Table(title=f"samples at step {step} (all in {SAMPLES_FILE})", show_lines=False)
    for col in ("group", "prompt", "completion", "rewards"):
        table.add_column(col, overflow="fold", max_width=None if col != "prompt" else 40)
    for r in rows:
        rewards = ", ".join(f"{k}={v:.2f}" for k, v in r.get("rewards", {}).items())
        table.add_row(str(r["group"]), _cut(str(r["prompt"]), 80), _cut(r["completion"], 120), rewards)
    return table


def _cut(text: str, n: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"
