"""A decoder model's shape, read from its config.json, and its parameter counts by part.

Covers the Llama family the engine and learner run (model_type llama, qwen2, qwen3, mistral):
embedding [V, H]; per layer q [nh*d, H], k and v [nkv*d, H] (+ biases: Qwen2 always, Llama with
`attention_bias`), o [H, nh*d], gate and up [I, H], down [H, I] (+ biases with `mlp_bias`), two
RMSNorms [H] (+ Qwen3's per-head q/k norms [d]); a final norm [H]; the head [V, H] unless tied to
the embedding. `Architecture.from_config` reads those fields; `total` equals
`sum(p.numel() for p in model.parameters())` of the model transformers builds (tested on tiny-llama,
tiny-qwen2 and SmolLM2).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Architecture", "LORA_TARGETS"]

LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
"""The linear layers of a decoder layer (peft's "all-linear" adapts all of them, never the head)."""


@dataclass(frozen=True)
class Architecture:
    model_type: str
    vocab: int  # V
    hidden: int  # H
    layers: int  # L
    heads: int  # nh
    kv_heads: int  # nkv
    head_dim: int  # d
    intermediate: int  # I
    tied: bool  # the head is the embedding matrix
    qkv_bias: bool
    mlp_bias: bool
    qk_norm: bool  # Qwen3: RMSNorm of each head's q and k

    @classmethod
    def from_config(cls, config: dict, name: str = "the model") -> "Architecture":
        """From config.json's fields; a ValueError naming the missing field (or a nested config)."""
        need = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")
        missing = [k for k in need if not isinstance(config.get(k), int)]
        if missing:
            nested = [k for k in ("text_config", "llm_config") if isinstance(config.get(k), dict)]
            hint = f" (its decoder is under {nested[0]!r}: multimodal models are not planned)" if nested else ""
            raise ValueError(f"config.json of {name} has no {', '.join(missing)}: not a decoder-only LM covey can plan{hint}")
        kind = config.get("model_type", "llama")
        heads = config["num_attention_heads"]
        return cls(
            model_type=kind,
            vocab=config["vocab_size"],
            hidden=config["hidden_size"],
            layers=config["num_hidden_layers"],
            heads=heads,
            kv_heads=config.get("num_key_value_heads") or heads,
            head_dim=config.get("head_dim") or config["hidden_size"] // heads,
            intermediate=config["intermediate_size"],
            tied=bool(config.get("tie_word_embeddings", False)),  # transformers' default for these types
            qkv_bias=kind == "qwen2" or bool(config.get("attention_bias", False)),
            mlp_bias=bool(config.get("mlp_bias", False)),
            qk_norm=kind == "qwen3",
        )

    # ------------------------------------------------------------------ shapes
    @property
    def q_dim(self) -> int:
        return self.heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.head_dim

    def linear_shapes(self) -> dict[str, tuple[int, int]]:
        """(in, out) of each linear layer of one decoder layer, by its HF name."""
        h, i, q, kv = self.hidden, self.intermediate, self.q_dim, self.kv_dim
        return {"q_proj": (h, q), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (q, h),
                "gate_proj": (h, i), "up_proj": (h, i), "down_proj": (i, h)}  # fmt: skip

    # ------------------------------------------------------------------ parameter counts
    @property
    def layer_matmul(self) -> int:
        """Weights of one decoder layer's linear layers (no biases)."""
        return sum(a * b for a, b in self.linear_shapes().values())

    @property
    def layer(self) -> int:
        """All parameters of one decoder layer."""
        bias = (self.q_dim + 2 * self.kv_dim if self.qkv_bias else 0) + (2 * self.intermediate + self.hidden if self.mlp_bias else 0)
        return self.layer_matmul + bias + 2 * self.hidden + (2 * self.head_dim if self.qk_norm else 0)

    @property
    def embed(self) -> int:
        return self.vocab * self.hidden

    @property
    def root(self) -> int:
        """The parameters outside the decoder layers: embedding, final norm, untied head."""
        return self.embed * (1 if self.tied else 2) + self.hidden

    @property
    def total(self) -> int:
        return self.root + self.layers * self.layer

    def lora(self, rank: int, targets: str | list[str]) -> int:
        """Trainable parameters of LoRA adapters of `rank` on `targets` ("all-linear" or layer names):
        A [r, in] + B [out, r] per adapted linear layer of every decoder layer."""
        names = LORA_TARGETS if targets == "all-linear" else [targets] if isinstance(targets, str) else list(targets)
        unknown = [n for n in names if n not in LORA_TARGETS]
        if unknown:
            raise ValueError(f"model.lora.target_modules {unknown} are not linear layers of a {self.model_type} decoder "
                             f"layer; plan knows {', '.join(LORA_TARGETS)} (or all-linear)")  # fmt: skip
        shapes = self.linear_shapes()
        return self.layers * sum(rank * (shapes[n][0] + shapes[n][1]) for n in names)

    def kv_bytes_per_token(self, elt: int) -> int:
        """Bytes of K and V of one token over all layers at `elt` bytes per element."""
        return 2 * self.layers * self.kv_dim * elt
