"""The training loop: the step of docs/architecture.md, one call per stage.

    sample prompts -> rollout (engine) -> rewards -> group filter -> advantages -> learn -> sync -> log

The stages are components from other packages (samplers, rollout strategies, reward runners,
registries); this file only wires them and keeps the run's state (step, RNG, checkpoints).
`runtime.executor: thread` (`covey.runtime.thread`) runs `collect` for the next steps on a
background thread, within `runtime.max_staleness` (docs/runtime.md).
"""

from __future__ import annotations

import contextlib
import copy
import functools
import hashlib
import logging
import random
import threading
import time
from pathlib import Path
from typing import Any

import torch

from covey.algos.hooks import step_hooks
from covey.samplers import SAMPLERS, Draw, apply_feedback
from covey.samplers.lengths import check_prompt_lengths, prompt_token_limit
from covey.samplers.stats import prompt_stats
from covey.engine import ENGINES, SamplingParams
from covey.engine.support import engine_takes_dtype
from covey.rewards.scoring import Scorer, shaping_terms
from covey.strategies import STRATEGIES, RolloutContext, completion_texts
from covey.strategies.base import wants_reference_engine
from covey.rollouts import Rollouts
from covey.runtime.config import interrupts_on_update
from covey.runtime.staleness import staleness_metrics
from covey.runtime.thread import GenerationFailed, ThreadExecutor
from covey.tasks import get_task
from covey.train.checkpoint import (
    latest_checkpoint, load_checkpoint_meta, load_latest_checkpoint, load_weights, rng_state, save_checkpoint, save_hf_weights,
    set_rng_state,
)  # fmt: skip
from covey.train.trl_names import write_trainer_state
from covey.train.config import RunConfig
from covey.train.interrupt import StopFlag, StoppableEngine
from covey.train.threads import Threads
from covey.learner.fillers import fill_fields, needs_reference
from covey.learner.learner import Learner, reset_peak_memory
from covey.train.metrics import MetricsLogger, sample_rows
from covey.train.runlock import RunLock
from covey.learner.optim import build_optimizer
from covey.models.state import engine_model, engine_state, trainable_state
from covey.train.setup import build_objective, build_reference, build_rewards, check_run, load_policy

__all__ = ["Trainer"]


class Trainer:
    """One run: config in, steps out. `model`/`tokenizer`, `task` and `reward_funcs` may be given as
    objects (the Python API); otherwise they are built from the config."""

    def __init__(self, cfg: RunConfig, run_dir: str | Path, *, resume: bool = False, model=None, tokenizer=None,
                 task=None, reward_funcs: list | None = None):  # fmt: skip
        self.cfg, self.run_dir = cfg, Path(run_dir)
        fresh = not self.run_dir.exists() or not any(self.run_dir.iterdir())
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._lock = RunLock(self.run_dir).acquire()  # refuses a second process on this folder
        try:
            self._build(cfg, resume, model, tokenizer, task, reward_funcs)
        except BaseException:
            self._lock.release()
            if fresh:  # a bad task/reward/model leaves no empty run folder behind
                self._lock.path.unlink(missing_ok=True)
                with contextlib.suppress(OSError):  # not empty: something else wrote there, keep it
                    self.run_dir.rmdir()
            raise

    def _build(self, cfg: RunConfig, resume: bool, model, tokenizer, task, reward_funcs) -> None:
        torch.manual_seed(cfg.seed)
        random.seed(cfg.seed)
        self.threads = Threads(cfg.threads)  # auto: from the cores free now; the loop re-checks between steps
        self.threads.apply()
        self.device = torch.device(cfg.resolved_device())
        self.task = task if task is not None else get_task(cfg.task.name, **cfg.task.params)
        items = list(self.task.examples(cfg.task.split))
        self.n_items = len(items)  # prompts per epoch (trainer_state.json)
        self.strategy = STRATEGIES.build(cfg.strategy_spec().name, cfg.strategy_spec().params)
        check_run(cfg, self.task, reward_funcs)  # what `covey config show` checks too
        self.rewards = build_rewards(cfg, self.task, reward_funcs)  # bad reward names/params fail before the model loads
        self._owns_ray = None
        if cfg.runtime.executor == "ray":  # the cluster answers and can hold the run, before the model loads
            from covey.runtime.ray_setup import connect

            self._owns_ray = connect(cfg)
        self.model, self.tokenizer = load_policy(cfg.model, model=model, tokenizer=tokenizer, device=self.device)
        self.max_prompt_tokens, why = prompt_token_limit(self.model, self.task, cfg.sampling.max_new_tokens)
        if self.max_prompt_tokens:  # long prompts fail (or are skipped) now, not when first sampled
            items = check_prompt_lengths(items, self.tokenizer, self.max_prompt_tokens, cfg.task.on_long_prompt, why=why)
        sampler = cfg.sampler_spec()
        self.sampler = SAMPLERS.build(sampler.name, sampler.params, items, cfg.seed)
        self.advantage = cfg.algo.bind("advantage")
        self.objective = build_objective(cfg, self.model, self.device)  # the loss the learner's update trains
        self.fields = set(self.objective.requires) | set(self.sampler.requires)  # optional Rollouts fields read
        self.need_entropies = "entropies" in self.fields
        self.reference = build_reference(self.model, cfg.model) if needs_reference(self.fields) else None
        shaping = shaping_terms(cfg.algo, cfg.sampling.max_new_tokens, self.fill_fields)
        self.scorer = Scorer(self.rewards, lambda b: completion_texts(self.tokenizer, b), shaping)
        # dtype auto is measured per process; a resumed run keeps what its first process chose
        chosen = _chosen_dtypes(self.run_dir) if resume else {}
        learner_dtype = chosen.get("learner", cfg.model.dtype) if cfg.model.dtype == "auto" else cfg.model.dtype
        self.optimizer, self.scheduler = build_optimizer(self.model, cfg.optim, cfg.steps)
        o = cfg.optim
        self.learner = Learner(
            self.model, self.optimizer, self.scheduler, cfg.algo, objective=self.objective,
            temperature=cfg.sampling.temperature, max_new_tokens=cfg.sampling.max_new_tokens,
            epochs=o.epochs, mini_batches=o.mini_batches, micro_batch_size=o.micro_batch_size,
            grad_clip=o.grad_clip, dtype=learner_dtype,
        )  # fmt: skip
        engine_params = dict(cfg.engine.params)
        if engine_params.get("dtype", "auto") == "auto" and engine_takes_dtype(cfg.engine.name):
            engine_params["dtype"] = chosen.get("engine") or self.learner.dtype  # follows model.dtype
        # an adapter sync: the engine is built from the PEFT model and every sync passes it (only the adapter moves)
        syncs_adapter = ENGINES.get(cfg.engine.name).caps.syncs_adapter
        self.adapter_sync = bool(syncs_adapter and syncs_adapter(cfg.engine.params, cfg.model.lora, cfg.runtime.executor,
                                                                      cfg.resolved_device()))
        source = self.model if self.adapter_sync else engine_model(self.model)
        if cfg.runtime.executor == "thread":  # the engine reads its own weights: the learner updates its in place meanwhile
            source = own_copy(source, self.model)
        if cfg.runtime.executor == "ray":  # the engine in Ray actors, built there from a copy of the model
            from covey.runtime.ray_setup import build_engine

            self.engine = build_engine(cfg, self.run_dir, engine_params, source, self.tokenizer, self.rewards, self._owns_ray)
        else:
            self.engine = ENGINES.build(cfg.engine.name, engine_params, source, self.tokenizer)
        self.reference_engine = None  # an engine over the frozen reference, for a strategy that samples from it
        if wants_reference_engine(cfg.strategy_spec().name, cfg.strategy_spec().params):
            self.reference = self.reference or build_reference(self.model, cfg.model)
            self.reference_engine = ENGINES.build(cfg.engine.name, engine_params, self.reference.engine_model(), self.tokenizer)
        self._sampler_lock = threading.RLock()  # the generator thread and the learner both call the sampler
        self.executor = None
        if cfg.runtime.executor != "inline":
            self.executor = ThreadExecutor(self.collect, lambda weights, v: self.engine.load_weights(weights, version=v),
                                           max_staleness=cfg.runtime.max_staleness, timeout_s=cfg.runtime.timeout_s,
                                           limit=cfg.steps, interrupt_on_update=interrupts_on_update(cfg))  # fmt: skip
        # what the rollout strategy calls: under interrupt_on_update a weight update cuts its generate short
        self.rollout_engine = self.engine if self.executor is None else self.executor.rollout_engine(self.engine)
        # Ctrl-C inside a step (covey.train.interrupt): with the inline loop the step stops at its next safe point
        self.stop = StopFlag()
        self.stops_mid_step = self.executor is None  # the inline loop (thread / ray: the step finishes first)
        if self.stops_mid_step:
            self.rollout_engine = StoppableEngine(self.engine, self.stop)
            self.learner.stop_check = self.stop.check
            self.stop.engines = [e for e in (self.engine, self.reference_engine) if hasattr(e, "interrupt")]
        self.rewound = False  # the last step was abandoned and its state rewound to the step's start
        self.hooks = step_hooks(cfg.algo, learner=self.learner, reference=self.reference, optimizer=self.optimizer)
        self.step_num = 0
        self.last_metrics: dict[str, Any] = {}
        self.resumed_from: Path | None = None
        if resume:
            self._restore()
        self.learner_group = None  # runtime.learner_workers >= 2: learner actors (covey.runtime.ray_learner)
        if cfg.runtime.executor == "ray":
            from covey.runtime.ray_setup import build_learner_group

            self.learner_group = build_learner_group(cfg, self.learner, self.model, self.optimizer, self.scheduler, self.engine,
                                                     resume=self.resumed_from)  # fmt: skip
        lc = cfg.log
        self.logger = MetricsLogger(self.run_dir, report_to=lc.report_to, resume_step=self.step_num if resume else None,
                                    wandb_project=lc.wandb_project, wandb_mode=lc.wandb_mode, config=cfg.model_dump(mode="json"))  # fmt: skip
        self.last_samples: list[dict[str, Any]] = []

    # ------------------------------------------------------------------------------------ the step
    def step(self) -> dict[str, Any]:
        """One training step; returns its metrics (also written to metrics.jsonl).

        With the inline loop, a step that ends in an exception (a stop asked for with `stop.request()`:
        `StopRequested`, or an error) before its first optimizer step is rewound: the sampler, strategy,
        objective and hook state and the RNG go back to the step's start (`rewound` is then True), so a
        checkpoint written now equals one written between the steps."""
        start = self._start_state() if self.stops_mid_step else None
        self.rewound = False
        try:
            return self._step()
        except BaseException:
            if start is not None and self.learner.optimizer_steps == start["optimizer_steps"]:
                self._rewind(start)
            raise

    def _start_state(self) -> dict[str, Any]:
        """What a step changes before its first optimizer step (the model and optimizer stay as they were)."""
        return {"optimizer_steps": self.learner.optimizer_steps, "rng": rng_state(),
                "state": {name: copy.deepcopy(obj.state_dict()) for name, obj in self._stateful().items()},
                "hooks": [copy.deepcopy(h.state_dict()) if h.checkpoint_key is not None else None for h in self.hooks]}  # fmt: skip

    def _rewind(self, start: dict[str, Any]) -> None:
        set_rng_state(start["rng"])
        for name, obj in self._stateful().items():
            obj.load_state_dict(start["state"][name])
        for h, state in zip(self.hooks, start["hooks"]):
            if state:
                h.load_state_dict(state)
        self.optimizer.zero_grad(set_to_none=True)
        self.model.eval()
        self.rewound = True

    def _step(self) -> dict[str, Any]:
        t0 = time.perf_counter()
        reset_peak_memory(self.learner.device)  # memory/peak_gb: this step's peak on CUDA
        if self.executor is None:
            batch, metrics = self.collect()  # sample -> rollout -> rewards (-> group filter)
        else:  # made by the generator thread (covey.runtime.thread), within the staleness bound
            batch, metrics, behaviour = self.executor.next_batch(self.step_num)
            metrics.update(staleness_metrics(self.step_num, behaviour, batch.policy_version, batch.completion_mask))
            if self.step_num - behaviour > self.cfg.runtime.max_staleness:
                raise RuntimeError(f"runtime: batch {self.step_num} was generated at version {behaviour}, beyond "
                                   f"runtime.max_staleness={self.cfg.runtime.max_staleness}")  # fmt: skip
        t1 = time.perf_counter()
        published = None
        if len(batch) > 0:
            self.fill_fields(batch)
            if self.objective.uses_advantages:
                adv = self.advantage(batch)  # advantages
                batch.advantages, batch.sample_mask = adv.advantages.float(), adv.sample_mask
                metrics.update(adv.metrics)
            gen = torch.Generator().manual_seed(self._seed("learn"))
            with contextlib.ExitStack() as around:
                hooked = [around.enter_context(h.around_update(self.step_num + 1, batch)) for h in self.hooks]
                metrics.update((self.learner_group or self.learner).update(batch, gen))  # the objective's optimizer steps
            for m in hooked:
                metrics.update(m)
            if self.executor is None:
                self.engine.load_weights(self._engine_weights(), version=self.step_num + 1)  # weight sync
            else:  # a copy; the generator thread loads it between two batches
                published = weights_copy(engine_state(self.model))
            with self._sampler_lock:
                metrics.update(self.sampler.after_update(batch, self.policy_logprobs))
        for h in self.hooks:
            metrics.update(h.after_update(self.step_num + 1))
        if self.executor is not None:  # after after_update: with max_staleness 0 the sampler sees inline's order
            self.executor.publish(published, self.step_num + 1)
        self.step_num += 1
        metrics["system/threads"] = torch.get_num_threads()
        metrics["time/learn"] = time.perf_counter() - t1
        metrics["time/step"] = time.perf_counter() - t0
        self.logger.log(self.step_num, metrics)
        self.last_metrics = metrics
        every = self.cfg.log.completions_every
        self.last_samples = sample_rows(batch, self.tokenizer, self.cfg.log.completions_rows) if every and self.step_num % every == 0 else []
        if self.last_samples:
            self.logger.log_samples(self.step_num, self.last_samples)
        if self.cfg.checkpoint.every and self.step_num % self.cfg.checkpoint.every == 0:
            self.save()
        return metrics

    # ------------------------------------------------------------------------------------ stages
    def collect(self, step: int | None = None, version: int | None = None) -> tuple[Rollouts, dict[str, Any]]:
        """Sampler -> rollout strategy (through the engine) -> scored batch -> sampler feedback.
        `step`/`version`: the batch's step and the engine's policy version (default: the current
        step; the thread executor collects ahead)."""
        cfg = self.cfg
        step = self.step_num if step is None else step
        version = step if version is None else version
        G = cfg.rollout.group_size + cfg.algo.group_size_extra
        timer = {"reward": 0.0}

        def score(batch: Rollouts) -> dict[str, Any]:
            if self.stops_mid_step:
                self.stop.check()  # a safe point: scoring may take minutes
            t = time.perf_counter()
            if self.rewards.needs_engine:  # a judge with the `policy` backend: the live policy referees (URPO)
                self.rewards.set_context(engine=self.engine, tokenizer=self.tokenizer, policy_version=version)
            out = self.scorer(batch)
            timer["reward"] += time.perf_counter() - t
            return out

        def draw(k: int) -> list[Draw]:
            with self._sampler_lock:
                return _checked_draws(self.sampler, self.sampler.next(k, G))

        t = time.perf_counter()
        draws = draw(cfg.rollout.prompts_per_step)  # the sampler hooks, in order: covey.samplers.base
        sampling = functools.partial(self._sampling, step=step)
        ctx = RolloutContext(engine=self.rollout_engine, tokenizer=self.tokenizer, draws=draws, sampling=sampling,
                             score=score, draw=draw, step=step, policy_version=version,
                             reference_engine=self.reference_engine, max_prompt_tokens=self.max_prompt_tokens,
                             objective=self.objective)  # fmt: skip
        with self._sampler_lock:
            draws, metrics = self.sampler.before_rollout(draws, ctx)
        ctx.draws = _checked_draws(self.sampler, draws)
        if not draws:  # nothing left to roll out: the step is skipped
            return Rollouts.empty(), {**metrics, "time/reward": timer["reward"], "time/generate": time.perf_counter() - t,
                                    "train/skipped_step": 1.0}  # fmt: skip
        batch, m = self.strategy.rollout([d.item for d in draws], ctx)
        metrics.update(m)
        if len(batch) == 0:  # the strategy skipped the step (no prompt left after its own filter)
            return batch, {**metrics, "time/reward": timer["reward"], "time/generate": time.perf_counter() - t,
                           "train/skipped_step": 1.0}  # fmt: skip
        if batch.rewards is None:
            metrics.update(score(batch))
        elapsed = time.perf_counter() - t
        metrics["time/reward"] = timer["reward"]
        metrics["time/generate"] = elapsed - timer["reward"]
        metrics.update(_rollout_metrics(batch, metrics["time/generate"]))
        with self._sampler_lock:
            feedback = self.sampler.observe(batch)  # before advantages; it may fill a declared Rollouts field (a baseline)
        apply_feedback(batch, feedback)  # the gate: the trainer, not the sampler, drops rows / tokens, zeroes rewards
        metrics.update(feedback.metrics)
        metrics.update(prompt_stats(batch))  # pass-rate histogram, zero-signal groups, rollouts per prompt
        return batch, metrics

    def fill_fields(self, batch: Rollouts) -> None:
        """Fill the optional fields the run's components asked for (registry `requires`; `covey.learner.fillers`)."""
        fill_fields(batch, self.fields, self.learner, self.reference)

    @torch.no_grad()
    def policy_logprobs(self, prompt_ids: list[torch.Tensor], completion_ids: torch.Tensor, completion_mask: torch.Tensor) -> torch.Tensor:
        """[N, T] log-probs of the given completions under the current policy (0 on padding), for a
        sampler's `after_update` hook: one micro-batched no-grad forward through the learner."""
        n = len(prompt_ids)
        rows = Rollouts(prompt_ids=list(prompt_ids), completion_ids=completion_ids, completion_mask=completion_mask,
                        behaviour_logprobs=torch.zeros_like(completion_mask), group=torch.arange(n),
                        prompt_id=torch.zeros(n, dtype=torch.long))  # fmt: skip
        self.learner.fill_logprobs(rows.validate())
        return rows.old_logprobs

    # ------------------------------------------------------------------------------------ plumbing
    def _seed(self, stage: str, sub: int = 0, step: int | None = None) -> int:
        """A seed that depends only on (run seed, step, stage): resumed runs draw the same numbers."""
        key = f"{self.cfg.seed}/{self.step_num if step is None else step}/{stage}/{sub}".encode()
        return int.from_bytes(hashlib.sha256(key).digest()[:8], "little") >> 1

    def _sampling(self, round_: int = 0, step: int | None = None) -> SamplingParams:
        s = self.cfg.sampling
        return SamplingParams(
            temperature=s.temperature, top_p=s.top_p, top_k=s.top_k, min_p=s.min_p,
            max_new_tokens=s.max_new_tokens, stop_strings=tuple(s.stop_strings),
            seed=self._seed("generate", round_, step), return_entropies=self.need_entropies,
            ignore_eos=s.ignore_eos,
        )  # fmt: skip

    def _stateful(self) -> dict[str, Any]:
        """Components whose state the checkpoint holds (through torch.save: tensors, int keys intact)."""
        return {"sampler": self.sampler, "strategy": self.strategy, "regularizers": self.objective}

    def dtypes(self) -> dict[str, str]:
        """The compute dtypes in use ("bf16"/"fp32"): what `dtype: auto` chose, kept by a resume."""
        out = {"learner": self.learner.dtype}
        engine = getattr(self.engine, "dtype", None)  # a custom engine may have none
        if engine in (torch.bfloat16, torch.float32):
            out["engine"] = "bf16" if engine == torch.bfloat16 else "fp32"
        return out

    @contextlib.contextmanager
    def paused(self):
        """The engine and sampler to this thread alone (a checkpoint, an evaluation): the generator
        thread is held at a batch boundary, the engine holds the newest weights."""
        if self.executor is None:
            yield
            return
        self.executor.pause()
        try:
            yield
        finally:
            self.executor.resume()

    def save(self) -> Path:
        try:
            with self.paused():  # thread executor: finished, untrained batches are saved with the state that made them
                return self._write_checkpoint()
        except GenerationFailed as e:  # the generator is stuck inside a batch: the trained steps are saved anyway
            logging.getLogger(__name__).warning(
                "%s; saving step %d without holding the generator: the batch it is stuck in is drawn again by a resume "
                "(not bit-exactly as an uninterrupted run)", e, self.step_num)
            return self._write_checkpoint()

    def _write_checkpoint(self) -> Path:
        payload = {
            "model": trainable_state(self.model),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "rng": rng_state(),
            **{name: obj.state_dict() for name, obj in self._stateful().items()},
        }
        write_more = None  # the optimizer state lives in the learner actors (fsdp2: sharded, written by them)
        if self.learner_group is not None:
            write_more = self.learner_group.checkpoint(payload, self.optimizer, self.scheduler)
        for h in self.hooks:  # a hook's state, when it has one (a reset reference)
            if h.checkpoint_key is not None and (state := h.state_dict()):
                payload[h.checkpoint_key] = state
        if self.executor is not None:
            payload["runtime"] = self.executor.state_dict()
        meta = {"config": self.cfg.model_dump(mode="json"), "dtypes": self.dtypes()}
        hf = payload.pop("model", None) is not None  # unsharded: the weights go into TRL's files (model.safetensors)

        def files(folder: Path) -> None:
            if hf:
                save_hf_weights(self.model, self.tokenizer, folder)
            write_trainer_state(folder, self.run_dir, self.step_num, self.cfg, self.n_items)

        return save_checkpoint(self.run_dir, self.step_num, payload, meta, keep=self.cfg.checkpoint.keep, write_more=write_more,
                               files=files)  # fmt: skip

    def _engine_weights(self):
        """What a weight sync passes the engine: the PEFT model under an adapter sync (`EngineCaps.syncs_adapter`), else
        `engine_state` (the model, or LoRA's merged weights)."""
        return self.model if self.adapter_sync else engine_state(self.model)

    def _restore(self) -> None:
        found = load_latest_checkpoint(self.run_dir, map_location="cpu")  # load_state_dict moves to the device
        if found is None:
            raise FileNotFoundError(f"{self.run_dir} has no checkpoint to resume from")
        path, payload, meta = found
        load_weights(self.model, path, payload)
        if "optimizer" in payload:
            self.optimizer.load_state_dict(payload["optimizer"])
        elif self.cfg.runtime.sharding != "fsdp2":  # an fsdp2 run's shards, resumed unsharded (fsdp2 ranks read their own)
            from covey.runtime.dcp import load_optimizer

            load_optimizer(self.model, self.optimizer, path)
        self.resumed_from = path
        self.scheduler.load_state_dict(payload["scheduler"])
        set_rng_state(payload["rng"])
        for name, obj in self._stateful().items():
            obj.load_state_dict(payload.get(name, meta.get(name, {})))
        for h in self.hooks:
            if h.checkpoint_key in payload:
                h.load_state_dict(payload[h.checkpoint_key])
        self.step_num = meta["step"]
        self.engine.load_weights(self._engine_weights(), version=self.step_num)
        if self.executor is not None:
            self.executor.load_state_dict(payload.get("runtime", {}), version=self.step_num)

    def close(self) -> None:
        """Free the reward workers, the engine, the metrics files and the run folder's lock (idempotent)."""
        if self.executor is not None:
            self.executor.close()
        if getattr(self, "learner_group", None) is not None:
            self.learner_group.close()
        self.rewards.close()
        self.engine.close()
        if self.reference_engine is not None:
            self.reference_engine.close()
        self.logger.close()
        self._lock.release()


def _checked_draws(sampler, draws) -> list[Draw]:
    """The sampler's draws, refused with a clear error when they are not a list of `Draw`s."""
    bad = [d for d in draws if not isinstance(d, Draw)] if isinstance(draws, list) else [draws]
    if bad:
        got = type(bad[0]).__name__
        raise TypeError(f"sampler {type(sampler).__name__}: next() and before_rollout() must return a list of "
                        f"covey.samplers.Draw, got {got}")  # fmt: skip
    return draws


def _rollout_metrics(batch: Rollouts, gen_time: float) -> dict[str, float]:
    lengths = batch.lengths.float()
    truncated = [r == "length" for r in (batch.finish_reason or [])]
    return {
        "length/mean": float(lengths.mean()),
        "length/max": float(lengths.max()),
        "length/truncated_frac": sum(truncated) / max(len(truncated), 1),
        "throughput/gen_tokens_per_s": float(lengths.sum()) / max(gen_time, 1e-9),
    }


def _chosen_dtypes(run_dir: Path) -> dict[str, str]:
    """The dtypes a run's latest checkpoint was written with ({} when none or an older checkpoint)."""
    path = latest_checkpoint(run_dir)
    if path is None:
        return {}
    return dict(load_checkpoint_meta(path).get("dtypes") or {})


def own_copy(source: torch.nn.Module, policy: torch.nn.Module) -> torch.nn.Module:
    """The engine's own copy of its source model (LoRA's merged copy already is one)."""
    return source if source is not policy else copy.deepcopy(source).requires_grad_(False)


def weights_copy(state) -> dict[str, torch.Tensor]:
    """A detached copy of what `engine.load_weights` loads (a model or a state dict)."""
    state = state.state_dict() if hasattr(state, "state_dict") else state
    return {k: v.detach().clone() for k, v in state.items()}
