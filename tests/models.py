"""Real models for the whole-model tests and benchmarks: HuggingFace transformers built from
configs with random weights (nothing is downloaded), and torch.nn models.

Each factory returns (module, example inputs, targets, loss name); `loss` names how a training
step scores the module's output against the targets, in torch and in MindSpore alike
(loss_cell.py is the MindSpore side). This module imports torch only: the benchmarks' torch eager
worker, a process that never imports MindSpore, builds its models here.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn


@dataclass
class Case:
    module: nn.Module
    inputs: tuple[torch.Tensor, ...]
    target: torch.Tensor
    loss: str  # 'lm' (next-token cross entropy), 'class' (cross entropy) or 'mse'


def gpt2(layers: int = 2, hidden: int = 32, heads: int = 2, seq: int = 8, batch: int = 2,
         vocab: int = 100, dropout: float = 0.1) -> Case:
    import transformers

    config = transformers.GPT2Config(
        vocab_size=vocab, n_positions=max(seq, 32), n_embd=hidden, n_layer=layers, n_head=heads,
        resid_pdrop=dropout, embd_pdrop=dropout, attn_pdrop=dropout, use_cache=False,
        bos_token_id=0, eos_token_id=0)
    tokens = torch.randint(0, vocab, (batch, seq + 1))
    return Case(transformers.GPT2LMHeadModel(config).eval(), (tokens[:, :-1],), tokens[:, 1:],
                "lm")


def bert(layers: int = 2, hidden: int = 32, heads: int = 2, seq: int = 8, batch: int = 2,
         vocab: int = 100, labels: int = 3, dropout: float = 0.1) -> Case:
    import transformers

    config = transformers.BertConfig(
        vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
        intermediate_size=4 * hidden, max_position_embeddings=max(seq, 32), num_labels=labels,
        hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout)
    return Case(transformers.BertForSequenceClassification(config).eval(),
                (torch.randint(0, vocab, (batch, seq)),), torch.randint(0, labels, (batch,)),
                "class")


def t5(layers: int = 2, hidden: int = 32, heads: int = 4, seq: int = 7, target_seq: int = 5,
       batch: int = 2, vocab: int = 64) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """An encoder-decoder (T5) and its inputs (ids, mask, decoder ids). Under autograd, its
    attention (an additive position bias that requires grad) returns other strides than its
    capture saw: the model behind programs' view -> reshape
    (ms_aten/programs/lowering/program.py)."""
    import transformers

    config = transformers.T5Config(
        vocab_size=vocab, d_model=hidden, d_kv=hidden // heads, d_ff=2 * hidden,
        num_layers=layers, num_decoder_layers=layers, num_heads=heads, dropout_rate=0.0,
        use_cache=False, decoder_start_token_id=0, pad_token_id=0)
    inputs = (torch.randint(1, vocab, (batch, seq)), torch.ones(batch, seq, dtype=torch.long),
              torch.randint(1, vocab, (batch, target_seq)))
    return transformers.T5ForConditionalGeneration(config).eval(), inputs


class SmallCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 8, 3)
        self.bn2 = nn.BatchNorm2d(8)
        self.fc = nn.Linear(8 * 6 * 6, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.bn(self.conv(x)))
        x = torch.relu(self.bn2(self.conv2(x)))
        return self.fc(x.flatten(1))


def cnn(train: bool = False, batch: int = 4) -> Case:
    module = SmallCNN().train(train)
    return Case(module, (torch.randn(batch, 3, 8, 8),), torch.randint(0, 5, (batch,)), "class")


class LSTMRegressor(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(4, 16, num_layers=2, batch_first=True)
        self.head = nn.Linear(16, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y, _ = self.lstm(x)
        return self.head(y[:, -1])


def lstm(batch: int = 4, seq: int = 6) -> Case:
    return Case(LSTMRegressor(), (torch.randn(batch, seq, 4),), torch.randn(batch, 2), "mse")


def logits(output):
    """The tensor a model's output scores with: an HF model's ModelOutput, and an ms_aten Cell's
    dict of its fields, hold it as "logits"."""
    return output["logits"] if isinstance(output, dict) else output


def torch_loss(kind: str, out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    if kind == "lm":
        return nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), target.reshape(-1))
    if kind == "class":
        return nn.functional.cross_entropy(out, target)
    return nn.functional.mse_loss(out, target)


class WithLoss(nn.Module):
    """A model and its loss as one torch module, forward(x, target) -> the loss: captured by
    ms_aten.module, the loss runs in ATen inside the program instead of in MindSpore."""

    def __init__(self, model: nn.Module, kind: str):
        super().__init__()
        self.model = model
        self.kind = kind

    def forward(self, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return torch_loss(self.kind, logits(self.model(x)), target)
