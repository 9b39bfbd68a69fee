"""A Llama decoder in plain PyTorch, with exactly the maths of transformers' LlamaForCausalLM.

RMSNorm in float32, rotate-half (NeoX) RoPE, grouped-query attention, SwiGLU, tied embeddings.
Parameter names follow the Hugging Face checkpoint, so a state dict exports as is.
"""

import math
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class LlamaShape:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    max_position: int
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-5

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    def params(self) -> int:
        d, f, hd = self.hidden_size, self.intermediate_size, self.head_dim
        attn = d * d * 2 + 2 * d * self.num_kv_heads * hd
        layer = attn + 3 * d * f + 2 * d
        return self.vocab_size * d + self.num_layers * layer + d

    def hf_config(self, bos_id: int, eos_ids: list[int]) -> dict:
        """config.json of the equivalent LlamaForCausalLM."""
        return {
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_layers,
            "num_attention_heads": self.num_heads,
            "num_key_value_heads": self.num_kv_heads,
            "head_dim": self.head_dim,
            "hidden_act": "silu",
            "max_position_embeddings": self.max_position,
            "rms_norm_eps": self.rms_norm_eps,
            "rope_theta": self.rope_theta,
            "rope_scaling": None,
            "attention_bias": False,
            "attention_dropout": 0.0,
            "mlp_bias": False,
            "tie_word_embeddings": True,
            "initializer_range": 0.02,
            "bos_token_id": bos_id,
            "eos_token_id": eos_ids,
            "pad_token_id": bos_id,
            "torch_dtype": "float16",
            "use_cache": True,
        }

    def to_dict(self) -> dict:
        return asdict(self)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


def rope_tables(shape: LlamaShape, seq_len: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    hd = shape.head_dim
    inv_freq = 1.0 / (shape.rope_theta ** (torch.arange(0, hd, 2, dtype=torch.int64, device=device).float() / hd))
    pos = torch.arange(seq_len, device=device).float()
    freqs = torch.outer(pos, inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class Attention(nn.Module):
    def __init__(self, s: LlamaShape):
        super().__init__()
        self.s = s
        hd = s.head_dim
        self.q_proj = nn.Linear(s.hidden_size, s.num_heads * hd, bias=False)
        self.k_proj = nn.Linear(s.hidden_size, s.num_kv_heads * hd, bias=False)
        self.v_proj = nn.Linear(s.hidden_size, s.num_kv_heads * hd, bias=False)
        self.o_proj = nn.Linear(s.num_heads * hd, s.hidden_size, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        hd = self.s.head_dim
        q = self.q_proj(x).view(b, t, self.s.num_heads, hd).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.s.num_kv_heads, hd).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.s.num_kv_heads, hd).transpose(1, 2)
        cos, sin = cos.to(q.dtype), sin.to(q.dtype)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        groups = self.s.num_heads // self.s.num_kv_heads
        if groups > 1:
            k = k.repeat_interleave(groups, dim=1)
            v = v.repeat_interleave(groups, dim=1)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=1.0 / math.sqrt(hd))
        return self.o_proj(y.transpose(1, 2).reshape(b, t, -1))


class Mlp(nn.Module):
    def __init__(self, s: LlamaShape):
        super().__init__()
        self.gate_proj = nn.Linear(s.hidden_size, s.intermediate_size, bias=False)
        self.up_proj = nn.Linear(s.hidden_size, s.intermediate_size, bias=False)
        self.down_proj = nn.Linear(s.intermediate_size, s.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, s: LlamaShape):
        super().__init__()
        self.input_layernorm = RMSNorm(s.hidden_size, s.rms_norm_eps)
        self.self_attn = Attention(s)
        self.post_attention_layernorm = RMSNorm(s.hidden_size, s.rms_norm_eps)
        self.mlp = Mlp(s)

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class Llama(nn.Module):
    def __init__(self, s: LlamaShape):
        super().__init__()
        self.shape = s
        self.embed_tokens = nn.Embedding(s.vocab_size, s.hidden_size)
        self.layers = nn.ModuleList(Layer(s) for _ in range(s.num_layers))
        self.norm = RMSNorm(s.hidden_size, s.rms_norm_eps)
        self._init()

    def _init(self) -> None:
        # GPT-2 style: N(0, 0.02), residual output projections scaled down by depth.
        for name, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02
                if name.endswith(("o_proj.weight", "down_proj.weight")):
                    std /= math.sqrt(2 * self.shape.num_layers)
                nn.init.normal_(p, mean=0.0, std=std)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Logits for every position (tied LM head)."""
        cos, sin = rope_tables(self.shape, ids.shape[1], ids.device)
        x = self.embed_tokens(ids)
        for layer in self.layers:
            x = layer(x, cos, sin)
        return F.linear(self.norm(x), self.embed_tokens.weight)

    def hf_state_dict(self) -> dict[str, torch.Tensor]:
        """Tensors under their Hugging Face names (the tied LM head is not stored)."""
        return {f"model.{k}": v for k, v in self.state_dict().items()}


# The shipped pair. Sizes are set by the 20 MB budget of models/ with F16 weights stored twice
# (GGUF and safetensors): about 4.0M + 0.42M parameters. Head dim 64 suits every kiln kernel.
TARGET = LlamaShape(vocab_size=4096, hidden_size=256, intermediate_size=512, num_layers=5,
                    num_heads=4, num_kv_heads=2, max_position=1024)
DRAFT = LlamaShape(vocab_size=4096, hidden_size=64, intermediate_size=192, num_layers=3,
                   num_heads=1, num_kv_heads=1, max_position=1024)
