"""How faithful each algorithm component is: checked against released code, or reconstructed.

One row per registered component of the algorithm axes (and per preset), shown by `covey algos`.
The details behind each row (file, function, commit, and which constants are choices) are in the
component's docstring and its section of docs/algorithms.md.

    code           checked against the authors' released code (repository named)
    framework      checked against a framework's implementation (verl, TRL, oat), not the authors' own
    partial        the core mechanism from a primary source or code; some detail is a documented choice
    reconstructed  no code could be read: formula from the abstract / secondary sources (names of such
                   methods end in _provisional where the formula itself is a guess)

A component registered without a row here is listed with status "?" (and fails a test).
"""

from __future__ import annotations

__all__ = ["STATUS", "STATUS_MEANING", "status_of"]

STATUS_MEANING = {
    "code": "checked against the authors' released code",
    "framework": "checked against a framework implementation (verl / TRL / oat)",
    "partial": "core mechanism confirmed, some detail a documented choice",
    "reconstructed": "no code read: reconstructed from the paper's abstract or secondary sources",
}

_V, _T = "verl", "TRL"
STATUS: dict[tuple[str, str], tuple[str, str]] = {
    # ------------------------------------------------------------------ advantage
    ("advantage", "a_grae"): ("code", "Yu7-code/A-GRAE"),
    ("advantage", "ace"): ("reconstructed", "abstract; no code released"),
    ("advantage", "aepo_entropy"): ("code", "597358816/DCPO 33f8073e302d (AEPO branch)"),
    ("advantage", "arm"): ("partial", "abstract; c(o|q) definition a choice"),
    ("advantage", "branch_grpo"): ("code", "Fredreic1849/BranchGRPO 19fbb9fc92ad"),
    ("advantage", "brpo"): ("partial", "abstract; score range and normalisation choices"),
    ("advantage", "dagrpo_provisional"): ("reconstructed", "abstract; mask form a guess"),
    ("advantage", "dcpo"): ("code", "597358816/DCPO 33f8073e302d"),
    ("advantage", "dgpo"): ("code", "AMAP-ML/MathForge"),
    ("advantage", "disco"): ("code", "Optimization-AI/DisCO bd2b07812934 (gradient at pi_old: one update per batch)"),
    ("advantage", "dr_grpo"): ("code", "sail-sg/understand-r1-zero"),
    ("advantage", "drpo"): ("code", "Optimization-AI/DRPO"),
    ("advantage", "dr_mas"): ("code", "langfengQ/DrMAS 19c632b (group_by_agent_id)"),
    ("advantage", "seeupo"): ("code", "modelscope/AgentEvolver e59dea4 (seeupo) compute_grpo_outcome_advantage_local"),
    ("advantage", "ui_s1"): ("code", "X-PLUG/MobileAgent f7702e4 UI-S1/uis1/core_uis1.py"),
    ("advantage", "empg"): ("partial", "official pseudocode; combination reconstructed"),
    ("advantage", "gdpo"): ("code", "NVlabs/GDPO"),
    ("advantage", "gigpo"): ("code", "verl-agent gigpo/core_gigpo.py (fork xlan156/verl-agent 8ca3a46)"),
    ("advantage", "grpo"): ("framework", f"{_V} compute_grpo_outcome_advantage, {_T} GRPOTrainer"),
    ("advantage", "gtpo"): ("code", "winstonsmith1897/GTPO"),
    ("advantage", "hapo"): ("code", "starriver030515/HAPO 7671dde3e268"),
    ("advantage", "hgpo"): ("code", "the authors' verl-agent recipe/hgpo, copy at zzj1111/alfworldauto 51c1a039"),
    ("advantage", "identity"): ("code", "Alibaba-NLP/qqr 944a2e2"),
    ("advantage", "mars"): ("code", "thu-nics/MARSHAL 2db0222 (per-role whitening the default; the code's global one an option)"),
    ("advantage", "mc_grpo"): ("code", "lotusroot-kim/MC-GRPO"),
    ("advantage", "mssr"): ("partial", "abstract; shaping form from arXiv 2506.14758"),
    ("advantage", "noisy_verifier"): ("partial", "paper front matter and secondary summary; no code; GRPO hook a choice"),
    ("advantage", "ngrpo"): ("code", "nangongrui-ngr/NGRPO"),
    ("advantage", "oblr_baseline"): ("partial", "abstract; gradient-norm proxy from verl compute_optimal_token_baseline_advantage"),
    ("advantage", "polychromic"): ("partial", "summaries and a third-party re-implementation"),
    ("advantage", "portool_provisional"): ("reconstructed", "abstract and summaries; no code released"),
    ("advantage", "reinforce_pp_baseline"): ("framework", f"{_V} compute_reinforce_plus_plus_baseline_outcome_advantage"),
    ("advantage", "riskpo"): ("code", "RTkenny/RiskPO"),
    ("advantage", "rloo"): ("framework", f"{_V} compute_rloo_outcome_advantage"),
    ("advantage", "salt"): ("reconstructed", "paper text; no code released"),
    ("advantage", "self_redteam"): ("code", "mickelliu/selfplay-redteaming 0c56e50 (REINFORCE++, per-role normalize)"),
    ("advantage", "spo"): ("code", "verl-recipe spo/"),
    ("advantage", "spo_chain"): ("code", "AIFrameResearch/SPO b9fc6a263dec"),
    ("advantage", "spo_tree"): ("code", "AIFrameResearch/SPO b9fc6a263dec"),
    ("advantage", "tppo"): ("partial", "EGAE from the paper; value head a covey stand-in"),
    ("advantage", "treepo"): ("code", "multimodal-art-projection/TreePO f055523"),
    ("advantage", "trpa"): ("code", "XueruiSu/Trust-Region-Preference-Approximation f372585ed6ec (gradient at pi_old: one update per batch)"),
    ("advantage", "rover"): ("code", "yuxiaooye/ROVER ea5ce635ee03 compute_rover_outcome_advantage"),
    ("advantage", "vspo_clip_provisional"): ("reconstructed", "abstract names value-smoothing clipping; no code, form a guess"),
    ("advantage", "xrpo"): ("partial", "review summary and a third-party re-implementation"),
    # ------------------------------------------------------------------ surrogate
    ("surrogate", "cispo"): ("framework", f"{_V} compute_policy_loss_cispo, {_T} loss_type=cispo"),
    ("surrogate", "dhpo"): ("reconstructed", "abstract; no code released"),
    ("surrogate", "gspo"): ("framework", f"{_V} compute_policy_loss_gspo, {_T}"),
    ("surrogate", "gspo_token"): ("framework", f"{_V} compute_policy_loss_gspo, {_T}"),
    ("surrogate", "hapo"): ("code", "starriver030515/HAPO 7671dde3e268"),
    ("surrogate", "disco"): ("code", "Optimization-AI/DisCO bd2b07812934 (the loss, recomputed per mini-batch)"),
    ("surrogate", "trpa"): ("code", "XueruiSu/Trust-Region-Preference-Approximation f372585ed6ec (the loss, recomputed per mini-batch)"),
    ("surrogate", "luspo"): ("framework", f"{_T} loss_type=luspo"),
    ("surrogate", "ppo_clip"): ("framework", f"{_V} compute_policy_loss_vanilla"),
    ("surrogate", "etr_provisional"): ("reconstructed", "abstract; no code released"),
    ("surrogate", "r2vpo_provisional"): ("reconstructed", "abstract; no code released"),
    ("surrogate", "reg_grpo_provisional"): ("reconstructed", "abstract; code announced, not available"),
    ("surrogate", "reinforce"): ("framework", "textbook REINFORCE; verl / TRL on-policy loss"),
    ("surrogate", "rover"): ("code", "yuxiaooye/ROVER ea5ce635ee03 compute_rover_loss"),
    ("surrogate", "sapo"): ("framework", f"{_V} compute_policy_loss_sapo, {_T}"),
    ("surrogate", "bgpo"): ("reconstructed", "a description of a third-party port (compute_policy_loss_bgpo); no code read"),
    # ------------------------------------------------------------------ aggregation
    ("aggregation", "seq-mean-token-mean"): ("framework", f"{_V} agg_loss"),
    ("aggregation", "seq-mean-token-sum"): ("framework", f"{_V} agg_loss"),
    ("aggregation", "seq-mean-token-sum-constant"): ("framework", "oat masked_sum (official Dr. GRPO)"),
    ("aggregation", "seq-mean-token-sum-norm"): ("framework", f"{_V} agg_loss"),
    ("aggregation", "token-mean"): ("framework", f"{_V} agg_loss"),
    ("aggregation", "token-sum"): ("framework", f"{_V} agg_loss"),
    # ------------------------------------------------------------------ kl
    ("kl", "abs"): ("framework", f"{_V} kl_penalty_forward"),
    ("kl", "k1"): ("framework", f"{_V} kl_penalty_forward"),
    ("kl", "k1+"): ("framework", f"{_V} kl_penalty_forward"),
    ("kl", "k2"): ("framework", f"{_V} kl_penalty_forward"),
    ("kl", "k3"): ("framework", f"{_V} kl_penalty_forward, {_T} _compute_loss"),
    ("kl", "k3+"): ("framework", f"{_V} kl_penalty_forward"),
    ("kl", "low_var_kl"): ("framework", f"{_V} kl_penalty_forward"),
    # ------------------------------------------------------------------ regularizer
    ("regularizer", "disco_kl"): ("code", "Optimization-AI/DisCO bd2b07812934 (KL constraint)"),
    ("regularizer", "epo"): ("partial", "WujiangXu/EPO 5b6fa98e0346; default penalty a reading of the paper"),
    ("regularizer", "kl_old"): ("code", "XueruiSu/Trust-Region-Preference-Approximation f372585ed6ec"),
    ("regularizer", "llds"): ("partial", "third-party verl fork compute_llds_loss; not the authors' code"),
    ("regularizer", "r2vpo_provisional"): ("reconstructed", "abstract; no code released"),
    # ------------------------------------------------------------------ likelihood (masked diffusion, docs/diffusion.md)
    ("likelihood", "d1_one_step"): ("code", "dllm-reasoning/d1 837888f22c21 diffu-grpo/diffu_grpo_trainer.py"),
    ("likelihood", "elbo_antithetic"): ("code", "ML-GSAI/ESPO b5f2dac4c540 espo/espo_trainer.py"),
    ("likelihood", "elbo_double_mc"): ("reconstructed", "the naive baseline as GDPO's abstract describes it; no code"),
    ("likelihood", "elbo_mc"): ("code", "ML-GSAI/LLaDA b7e6c3565f19 get_log_likelihood.py"),
    ("likelihood", "elbo_sdmc"): ("reconstructed", "abstract and project page; no code reachable; N, K choices"),
    # ------------------------------------------------------------------ correction
    ("correction", "decoupled"): ("code", "AReaL ppo_actor_loss_fn"),
    ("correction", "mis"): ("framework", f"{_T} vllm_importance_sampling_mode"),
    ("correction", "tis"): ("framework", f"{_V} rollout_corr_helper.py"),
    # ------------------------------------------------------------------ preset
    ("preset", "cispo"): ("framework", f"{_V} example script"),
    ("preset", "dapo"): ("framework", f"{_V} recipe run_dapo_qwen2.5_32b.sh"),
    ("preset", "dart"): ("code", "Computer-use-agents/dart-gui e0e606d osworld async trainer script"),
    ("preset", "dgpo"): ("code", "AMAP-ML/MathForge run_dgpo.sh"),
    ("preset", "dr_grpo"): ("code", "sail-sg/understand-r1-zero (oat)"),
    ("preset", "drpo"): ("code", "Optimization-AI/DRPO"),
    ("preset", "gdpo"): ("partial", "TRL default loss (choice)"),
    ("preset", "grpo"): ("partial", "DeepSeekMath; beta 0.04 recalled"),
    ("preset", "gspo"): ("framework", "paper §5.1 via TRL / verl example"),
    ("preset", "gtpo"): ("code", "winstonsmith1897/GTPO"),
    ("preset", "loop"): ("code", "apple/ml-loop 6ade7b9"),
    ("preset", "seeupo"): ("code", "modelscope/AgentEvolver e59dea4 (seeupo) qwen3-seeupo-bfcl.yaml"),
    ("preset", "luspo"): ("framework", f"{_T}"),
    ("preset", "mc_grpo"): ("code", "lotusroot-kim/MC-GRPO recipe"),
    ("preset", "ngrpo"): ("code", "nangongrui-ngr/NGRPO script"),
    ("preset", "prorl"): ("partial", "secondary sources; no training code; reset period a choice"),
    ("preset", "riskpo"): ("code", "RTkenny/RiskPO script"),
    ("preset", "rloo"): ("partial", "choice of loss"),
    ("preset", "sapo"): ("framework", f"{_V} / {_T}"),
    ("preset", "bgpo"): ("reconstructed", "a description of a third-party port; mc_num 16 UNVERIFIED"),
    ("preset", "diffu_grpo"): ("code", "dllm-reasoning/d1 837888f22c21 train.yaml"),
    ("preset", "dlm_gdpo"): ("reconstructed", "abstract; SDMC N 3, K 1 and clip 0.2 UNVERIFIED"),
    ("preset", "espo"): ("code", "ML-GSAI/ESPO b5f2dac4c540 recipes/train.yaml"),
}


def status_of(kind: str, name: str) -> tuple[str, str]:
    """(status, source) of an algorithm component or preset; ("?", "") when it has no row."""
    return STATUS.get((kind, name), ("?", ""))
