"""The training loop: DESIGN.md's step, one call per stage.

    sample prompts -> rollout (engine) -> rewards -> group filter -> advantages -> learn -> sync -> log

The stages are components from other packages (samplers, rollout strategies, reward runners,
registries); this file only wires them and keeps the run's state (step, RNG, checkpoints).
"""

from __future__ import annotations

import hashlib
import random
import time
from pathlib import Path
from typing import Any

import torch

from covey.algos.kl import kl_reward_penalty
from covey.algos.shaping import overlong_penalty
from covey.data import UniformSampler, informative_groups
from covey.engine import SamplingParams, TorchEngine
from covey.rollout import completion_texts, item_columns, rollout_groups
from covey.rollouts import Rollouts
from covey.tasks import get_task
from covey.train.checkpoint import latest_checkpoint, load_checkpoint, rng_state, save_checkpoint, set_rng_state
from covey.train.config import RunConfig
from covey.train.learner import Learner
from covey.train.metrics import MetricsLogger
from covey.train.setup import (
    build_optimizer, build_reference, build_rewards, engine_model, engine_state, load_policy, trainable_state,
)  # fmt: skip

__all__ = ["Trainer"]


class Trainer:
    def __init__(self, cfg: RunConfig, run_dir: str | Path, *, resume: bool = False):
        self.cfg, self.run_dir = cfg, Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        torch.manual_seed(cfg.seed)
        random.seed(cfg.seed)
        self.task = get_task(cfg.task.name, **cfg.task.params)
        self.sampler = UniformSampler(list(self.task.examples(cfg.task.split)), seed=cfg.seed)
        self.rewards = build_rewards(cfg, self.task)  # bad reward names/params fail before the model loads
        self.model, self.tokenizer = load_policy(cfg.model)
        self.advantage = cfg.algo.bind("advantage")
        needs = cfg.algo.requires()  # optional Rollouts fields the chosen components read
        kl = cfg.algo.active().get("kl")
        self.kl_reward = cfg.algo.bind("kl") if kl is not None and kl.mode == "reward" else None
        self.need_ref = "ref_logprobs" in needs
        self.need_entropies = "entropies" in needs
        self.reference = build_reference(self.model, cfg.model) if self.need_ref else None
        self.engine = TorchEngine(engine_model(self.model), dtype=cfg.rollout.engine_dtype, tokenizer=self.tokenizer)
        self.optimizer, self.scheduler = build_optimizer(self.model, cfg.optim, cfg.steps)
        o = cfg.optim
        self.learner = Learner(
            self.model, self.optimizer, self.scheduler, cfg.algo,
            temperature=cfg.sampling.temperature, max_new_tokens=cfg.sampling.max_new_tokens,
            epochs=o.epochs, mini_batches=o.mini_batches, micro_batch_size=o.micro_batch_size,
            grad_clip=o.grad_clip, dtype=cfg.model.dtype,
        )  # fmt: skip
        self.step_num = 0
        if resume:
            self._restore()
        self.logger = MetricsLogger(self.run_dir, tensorboard=cfg.log.tensorboard, resume_step=self.step_num if resume else None)

    # ------------------------------------------------------------------------------------ the step
    def step(self) -> dict[str, Any]:
        """One training step; returns its metrics (also written to metrics.jsonl)."""
        t0 = time.perf_counter()
        batch, metrics = self.collect()  # sample -> rollout -> rewards -> group filter
        t1 = time.perf_counter()
        if len(batch) > 0:
            self.add_reference_logprobs(batch)
            adv = self.advantage(batch)  # advantages
            batch.advantages, batch.sample_mask = adv.advantages.float(), adv.sample_mask
            metrics.update(adv.metrics)
            gen = torch.Generator().manual_seed(self._seed("learn"))
            metrics.update(self.learner.update(batch, gen))  # surrogate + corrections + KL, aggregated
            self.engine.update_weights(engine_state(self.model))  # weight sync
        self.step_num += 1
        metrics["time/learn"] = time.perf_counter() - t1
        metrics["time/step"] = time.perf_counter() - t0
        self.logger.log(self.step_num, metrics)
        if self.cfg.checkpoint.every and self.step_num % self.cfg.checkpoint.every == 0:
            self.save()
        return metrics

    # ------------------------------------------------------------------------------------ stages
    def collect(self) -> tuple[Rollouts, dict[str, Any]]:
        """Generate and score batches until B informative groups are kept (dynamic sampling) or
        the generation budget runs out (then train on what was kept and say so in the metrics)."""
        cfg, algo = self.cfg, self.cfg.algo
        B, G = cfg.rollout.prompts_per_step, cfg.rollout.group_size + algo.group_size_extra
        kept: list[Rollouts] = []
        n_kept, gen_batches, zero_signal = 0, 0, []
        metrics: dict[str, Any] = {"time/generate": 0.0, "time/reward": 0.0}
        while True:
            t = time.perf_counter()
            items = self.sampler.next(B)
            batch = rollout_groups(self.engine, self.tokenizer, items, G, self._sampling(gen_batches))
            metrics["time/generate"] += time.perf_counter() - t
            t = time.perf_counter()
            metrics.update(self.score(batch, items))
            metrics["time/reward"] += time.perf_counter() - t
            batch.group = batch.group + gen_batches * B  # unique across generation batches
            gen_batches += 1
            if gen_batches == 1:
                metrics.update(_rollout_metrics(batch, metrics["time/generate"]))
            if not algo.dynamic_sampling:
                return batch, metrics
            keep = informative_groups(batch.scalar_rewards(), batch.group)
            zero_signal.append(1 - float(keep.float().mean()))
            kept.append(batch.select(keep))
            n_kept += int(keep.sum()) // G
            if n_kept >= B or gen_batches >= algo.max_gen_batches:
                break
        batch = Rollouts.concat(kept)
        batch = batch.select(torch.arange(min(len(batch), B * G)))  # truncate to B groups
        metrics.update({"filter/gen_batches": gen_batches, "filter/kept_groups": min(n_kept, B),
                        "filter/zero_signal_frac": sum(zero_signal) / len(zero_signal),
                        "filter/underfilled": float(n_kept < B)})  # fmt: skip
        return batch, metrics

    def score(self, batch: Rollouts, items: list[dict]) -> dict[str, Any]:
        """Fill batch.rewards [N, K]: reward functions, then shaping columns (overlong, KL penalty)."""
        G = len(batch) // len(items)
        rows = [item for item in items for _ in range(G)]
        texts = completion_texts(self.tokenizer, batch)
        columns = item_columns(rows)
        columns["completion_length"] = batch.lengths.tolist()  # token counts, for length rewards
        result = self.rewards([r["prompt"] for r in rows], texts, group=batch.group.tolist(), **columns)
        cols, names, weights = [result.rewards], list(result.names), list(result.weights)
        algo = self.cfg.algo
        if algo.overlong is not None:
            max_len = self.cfg.sampling.max_new_tokens
            pen = overlong_penalty(batch.lengths, max_len, algo.overlong.buffer_tokens(max_len), algo.overlong.penalty_factor)
            cols.append(pen.float()[:, None])
            names.append("overlong")
            weights.append(1.0)
        if self.kl_reward is not None:
            self.add_reference_logprobs(batch)
            kl_tok = self.kl_reward(batch.behaviour_logprobs, batch.ref_logprobs)
            penalty = kl_reward_penalty(kl_tok, batch.completion_mask, self.cfg.algo.kl.coef)
            cols.append(-penalty.float()[:, None])
            names.append("kl_penalty")
            weights.append(1.0)
        batch.rewards = torch.cat(cols, dim=1).float()
        batch.reward_names, batch.reward_weights = tuple(names), torch.tensor(weights, dtype=torch.float32)
        batch.validate()
        total = batch.scalar_rewards()
        out = dict(result.metrics)
        out["reward/mean"] = float(total.mean())  # the scalar reward advantages see (with shaping)
        for i, name in enumerate(names[len(result.names) :], start=len(result.names)):
            out[f"reward/{name}/mean"] = float(batch.rewards[:, i].mean())
        return out

    def add_reference_logprobs(self, batch: Rollouts) -> None:
        """Fill the optional fields the chosen components asked for (registry `requires`)."""
        if self.need_ref and batch.ref_logprobs is None:
            with self.reference.active() as ref_model:
                self.learner.fill_logprobs(batch, model=ref_model, field="ref_logprobs")

    # ------------------------------------------------------------------------------------ plumbing
    def _seed(self, stage: str, sub: int = 0) -> int:
        """A seed that depends only on (run seed, step, stage): resumed runs draw the same numbers."""
        key = f"{self.cfg.seed}/{self.step_num}/{stage}/{sub}".encode()
        return int.from_bytes(hashlib.sha256(key).digest()[:8], "little") >> 1

    def _sampling(self, gen_batch: int) -> SamplingParams:
        s = self.cfg.sampling
        return SamplingParams(
            temperature=s.temperature, top_p=s.top_p, top_k=s.top_k, min_p=s.min_p,
            max_new_tokens=s.max_new_tokens, stop_strings=tuple(s.stop_strings),
            seed=self._seed("generate", gen_batch), return_entropies=self.need_entropies,
            ignore_eos=s.ignore_eos,
        )  # fmt: skip

    def save(self) -> Path:
        payload = {
            "model": trainable_state(self.model),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "rng": rng_state(),
        }
        meta = {"sampler": self.sampler.state_dict(), "config": self.cfg.model_dump(mode="json")}
        return save_checkpoint(self.run_dir, self.step_num, payload, meta, keep=self.cfg.checkpoint.keep)

    def _restore(self) -> None:
        path = latest_checkpoint(self.run_dir)
        if path is None:
            raise FileNotFoundError(f"{self.run_dir} has no checkpoint to resume from")
        payload, meta = load_checkpoint(path)
        missing = set(trainable_state(self.model)) - set(payload["model"])
        if missing:
            raise ValueError(f"checkpoint {path} lacks weights {sorted(missing)[:3]}...: was it written by another model?")
        self.model.load_state_dict(payload["model"], strict=False)
        self.optimizer.load_state_dict(payload["optimizer"])
        self.scheduler.load_state_dict(payload["scheduler"])
        set_rng_state(payload["rng"])
        self.sampler.load_state_dict(meta["sampler"])
        self.step_num = meta["step"]
        self.engine.update_weights(engine_state(self.model))


def _rollout_metrics(batch: Rollouts, gen_time: float) -> dict[str, float]:
    lengths = batch.lengths.float()
    truncated = [r == "length" for r in (batch.finish_reason or [])]
    return {
        "length/mean": float(lengths.mean()),
        "length/max": float(lengths.max()),
        "length/truncated_frac": sum(truncated) / max(len(truncated), 1),
        "throughput/gen_tokens_per_s": float(lengths.sum()) / max(gen_time, 1e-9),
    }
