"""GPT-2 (transformers' GPT2LMHeadModel, eval mode, no cache) in plain torch, for the GPU machine's
benchmark, where transformers is not installed: the same weights by the same names, the same
computation (tests/test_aot_launcher.py checks it equals transformers' model on the CPU)."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def weights(names_and_shapes: list[tuple[str, list[int]]], device: torch.device,
            seed: int = 0) -> dict[str, torch.Tensor]:
    """Random weights as GPT-2 initializes them (normal(0, 0.02), layer norms at 1, biases at
    0), made on the CPU from `seed`, then moved to `device`."""
    generator = torch.Generator().manual_seed(seed)
    made = {}
    for name, shape in names_and_shapes:
        if ".ln_" in name and name.endswith(".weight"):
            tensor = torch.ones(shape)
        elif name.endswith(".bias"):
            tensor = torch.zeros(shape)
        else:
            tensor = torch.randn(shape, generator=generator) * 0.02
        made[name] = tensor.to(device)
    return made


def forward(w: dict[str, torch.Tensor], ids: torch.Tensor, n_layer: int, n_head: int,
            eps: float = 1e-5) -> torch.Tensor:
    """The logits of GPT2LMHeadModel(input_ids=ids) (its lm_head tied to the token embedding)."""
    positions = torch.arange(ids.shape[1], device=ids.device)
    h = w["transformer.wte.weight"][ids] + w["transformer.wpe.weight"][positions]
    for i in range(n_layer):
        p = f"transformer.h.{i}."
        x = F.layer_norm(h, h.shape[-1:], w[p + "ln_1.weight"], w[p + "ln_1.bias"], eps)
        q, k, v = torch.addmm(w[p + "attn.c_attn.bias"], x.flatten(0, 1),
                              w[p + "attn.c_attn.weight"]).view(*x.shape[:2], -1).chunk(3, -1)
        heads = [t.view(*t.shape[:2], n_head, -1).transpose(1, 2) for t in (q, k, v)]
        a = F.scaled_dot_product_attention(*heads, is_causal=True,
                                           scale=1 / math.sqrt(heads[0].shape[-1]))
        a = a.transpose(1, 2).flatten(2)
        h = h + (a @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"])
        x = F.layer_norm(h, h.shape[-1:], w[p + "ln_2.weight"], w[p + "ln_2.bias"], eps)
        x = F.gelu(x @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"], approximate="tanh")
        h = h + (x @ w[p + "mlp.c_proj.weight"] + w[p + "mlp.c_proj.bias"])
    h = F.layer_norm(h, h.shape[-1:], w["transformer.ln_f.weight"], w["transformer.ln_f.bias"],
                     eps)
    return h @ w["transformer.wte.weight"].t()
