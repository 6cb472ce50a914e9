"""Models called the way their users call them (torch.export's convention): keyword inputs,
nested inputs, constants of the capture, outputs in their structure; in both modes, against
torch eager and autograd."""
from __future__ import annotations

import copy

import mindspore as ms
import models
import numpy as np
import pytest
import torch
import transformers
from mindspore import nn
from test_module import assert_gradients_match
from torch.export import Dim

import ms_aten
from ms_aten import to_ms, to_torch

from common import set_mode

MODES = ["graph", "pynative"]


def assert_tree_close(got, want, rtol=1e-4, atol=1e-5) -> None:
    """A Cell's output against torch's: dicts (a ModelOutput) by key, tuples and lists by
    position, tensors by value."""
    if isinstance(want, dict):
        assert isinstance(got, dict), f"expected a dict, got {type(got).__name__}"
        assert list(got) == list(want)
        for key in want:
            assert_tree_close(got[key], want[key], rtol, atol)
    elif isinstance(want, (tuple, list)):
        assert type(got) is type(want), f"expected a {type(want).__name__}, got {got!r}"
        assert len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            assert_tree_close(g, w, rtol, atol)
    else:
        np.testing.assert_allclose(got.asnumpy(), want.detach().numpy(), rtol=rtol, atol=atol)


def gpt2() -> tuple[torch.nn.Module, dict[str, torch.Tensor]]:
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=100, n_positions=32, n_embd=32, n_layer=2,
                                     n_head=2, bos_token_id=0, eos_token_id=0)
    ids = torch.randint(0, 100, (2, 8))
    mask = torch.ones(2, 8, dtype=torch.long)
    mask[1, :3] = 0  # a left-padded row: the mask changes the logits
    return transformers.GPT2LMHeadModel(config).eval(), {"input_ids": ids,
                                                          "attention_mask": mask}


def bert() -> tuple[torch.nn.Module, dict[str, torch.Tensor]]:
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2,
                                     num_attention_heads=2, intermediate_size=64,
                                     max_position_embeddings=32, type_vocab_size=2)
    ids = torch.randint(0, 100, (2, 8))
    types = torch.zeros(2, 8, dtype=torch.long)
    types[:, 4:] = 1
    mask = torch.ones(2, 8, dtype=torch.long)
    mask[0, 6:] = 0
    return transformers.BertModel(config).eval(), {"input_ids": ids, "token_type_ids": types,
                                                    "attention_mask": mask}


def t5() -> tuple[torch.nn.Module, dict[str, torch.Tensor]]:
    torch.manual_seed(0)
    module, (ids, mask, decoder_ids) = models.t5()
    return module, {"input_ids": ids, "attention_mask": mask, "decoder_input_ids": decoder_ids}


# Each model with the constants its users pass, and the output fields its loss sums.
MODELS = {"gpt2": (gpt2, {"use_cache": False, "return_dict": True}, ("logits",)),
          "bert": (bert, {"return_dict": True}, ("last_hidden_state", "pooler_output")),
          "t5": (t5, {"use_cache": False}, ("logits",))}


class KeywordLoss(nn.Cell):
    """A loss that calls the model as its users do, by keyword, inside its own construct: in
    GRAPH mode, MindSpore compiles the call (the keywords, the dict of outputs) into its graph."""

    def __init__(self, net: nn.Cell, fields: tuple[str, ...]):
        super().__init__()
        self.net = net
        self.fields = fields

    def construct(self, inputs):
        out = self.net(**inputs)
        total = 0
        for field in self.fields:
            total = total + (out[field] * out[field]).mean()
        return total


def torch_loss(out, fields) -> torch.Tensor:
    return sum((out[field] * out[field]).mean() for field in fields)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", list(MODELS))
def test_a_transformers_model_runs_from_its_own_forward_by_keyword(name, mode):
    """The model itself, no wrapper: captured with the keywords and constants its users pass,
    called by keyword (and by position), its outputs a dict by field name; the forward, the
    loss and every parameter's gradient against torch's."""
    make, constants, fields = MODELS[name]
    module, inputs = make()
    set_mode(mode)
    cell = ms_aten.module(copy.deepcopy(module), kwargs={**inputs, **constants})
    assert cell.program.input_names == tuple(inputs)
    want = module(**inputs, **constants)
    ms_inputs = {key: to_ms(value) for key, value in inputs.items()}
    out = cell(**ms_inputs)
    assert_tree_close(out, dict(want))
    ids, *rest = ms_inputs.items()  # input_ids by position, as forward binds it
    assert_tree_close(cell(ids[1], **dict(rest)), dict(want))
    value, grads = ms.value_and_grad(KeywordLoss(cell, fields), None,
                                     cell.trainable_params())(ms_inputs)
    loss = torch_loss(module(**inputs, **constants), fields)
    loss.backward()
    np.testing.assert_allclose(float(value), loss.item(), rtol=1e-4)
    assert_gradients_match(grads, cell, module)


class Nested(torch.nn.Module):
    """Inputs in a list and a dict beside a float constant; outputs a dict holding a tuple
    and a list."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(4, 4)

    def forward(self, xs: list[torch.Tensor], extra: dict[str, torch.Tensor],
                scale: float = 1.0, bias: torch.Tensor | None = None):
        hidden = self.proj(xs[0]) * extra["gate"] + xs[1] * scale
        return {"hidden": hidden, "pair": (hidden.sum(-1), [extra["gate"] * 2, hidden.tanh()])}


def nested_inputs() -> tuple[list[torch.Tensor], dict[str, torch.Tensor]]:
    torch.manual_seed(1)
    return [torch.randn(3, 4), torch.randn(3, 4)], {"gate": torch.randn(3, 4)}


class NestedLoss(nn.Cell):
    """Calls the nested model inside its construct, its inputs built there."""

    def __init__(self, net: nn.Cell):
        super().__init__()
        self.net = net

    def construct(self, a, b, gate):
        out = self.net([a, b], extra={"gate": gate}, scale=2.0)
        return out["hidden"].sum() + (out["pair"][1][1] * out["pair"][0].reshape(3, 1)).sum()


@pytest.mark.parametrize("mode", MODES)
def test_nested_inputs_and_outputs_with_gradients_through_them(mode):
    module = Nested()
    xs, extra = nested_inputs()
    set_mode(mode)
    cell = ms_aten.module(copy.deepcopy(module), (xs,), {"extra": extra, "scale": 2.0})
    assert cell.program.input_names == ("xs.0", "xs.1", "extra.gate")
    ms_xs, gate = [to_ms(x) for x in xs], to_ms(extra["gate"])
    want = module(xs, extra, 2.0)
    assert_tree_close(cell(ms_xs, extra={"gate": gate}), want)
    assert_tree_close(cell(xs=ms_xs, extra={"gate": gate}, scale=2.0), want)

    grad_fn = ms.value_and_grad(NestedLoss(cell), (0, 1, 2), cell.trainable_params())
    value, (input_grads, weight_grads) = grad_fn(*ms_xs, gate)
    leaves = [x.clone().requires_grad_() for x in (*xs, extra["gate"])]
    out = module(leaves[:2], {"gate": leaves[2]}, 2.0)
    loss = out["hidden"].sum() + (out["pair"][1][1] * out["pair"][0].reshape(3, 1)).sum()
    loss.backward()
    np.testing.assert_allclose(float(value), loss.item(), rtol=1e-5)
    for got, leaf in zip(input_grads, leaves, strict=True):
        np.testing.assert_allclose(got.asnumpy(), leaf.grad.numpy(), rtol=1e-5, atol=1e-6)
    assert_gradients_match(weight_grads, cell, module)


class Stack(torch.nn.Module):
    """A `*xs` forward: any number of inputs."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = torch.nn.Parameter(torch.tensor(1.5))

    def forward(self, *xs: torch.Tensor) -> torch.Tensor:
        return torch.cat(xs, dim=0) * self.scale


@pytest.mark.parametrize("dynamic_shapes", [
    ({0: Dim("n", max=16)}, {0: Dim("m", max=16)}),  # one spec per input
    {"xs": ({0: Dim("n", max=16)}, {0: Dim("m", max=16)})},  # torch.export's, by name
], ids=["per_input", "by_name"])
@pytest.mark.parametrize("mode", MODES)
def test_a_var_positional_forward_takes_one_dynamic_spec_per_input(mode, dynamic_shapes):
    module = Stack()
    set_mode(mode)
    cell = ms_aten.module(copy.deepcopy(module), (torch.randn(2, 3), torch.randn(4, 3)),
                          dynamic_shapes=dynamic_shapes)
    assert cell.program.dynamic and cell.program.input_names == ("xs.0", "xs.1")
    for n, m in [(2, 4), (5, 1), (16, 7)]:
        a, b = torch.randn(n, 3), torch.randn(m, 3)
        assert_tree_close(cell(to_ms(a), to_ms(b)), module(a, b))
    with pytest.raises((ValueError, RuntimeError),
                       match=r"input 1 \('xs.1'\) dim 0 \(m\) is 17, outside its range"):
        cell(to_ms(torch.randn(2, 3)), to_ms(torch.randn(17, 3))).asnumpy()


class Misuse(nn.Cell):
    """Calls a captured GPT-2 inside its graph with the given keywords."""

    def __init__(self, net: nn.Cell, keyword: str, use_cache: bool):
        super().__init__()
        self.net = net
        self.keyword = keyword
        self.use_cache = use_cache

    def construct(self, ids):
        if self.keyword == "input_ids":
            return self.net(input_ids=ids, use_cache=self.use_cache)["logits"]
        return self.net(input_ids=ids, attention_mak=ids)["logits"]


@pytest.mark.parametrize("mode", MODES)
def test_a_wrong_keyword_a_missing_input_or_another_constant_is_a_clear_error(mode):
    module, inputs = gpt2()
    set_mode(mode)
    cell = ms_aten.module(copy.deepcopy(module), kwargs={**inputs, "use_cache": False})
    ids, mask = to_ms(inputs["input_ids"]), to_ms(inputs["attention_mask"])
    captured = "it was captured with input_ids, attention_mask, use_cache=False"
    with pytest.raises(TypeError, match=r"'GPT2LMHeadModel' got an unexpected keyword input "
                                        rf"'attention_mak'; {captured}"):
        cell(input_ids=ids, attention_mak=mask)
    with pytest.raises(TypeError, match=rf"missing the input 'attention_mask'; {captured}"):
        cell(input_ids=ids)
    with pytest.raises(TypeError, match=r"input 'use_cache' differs from the capture's constant "
                                        r"False \(got True\)"):
        cell(input_ids=ids, attention_mask=mask, use_cache=True)
    with pytest.raises(TypeError, match=r"input 'attention_mask' is a NoneType, where the "
                                        r"program takes a MindSpore Tensor int64\["):
        cell(ids, attention_mask=None)
    # The same mistakes inside a compiled graph (GRAPH) or a Cell run eagerly (PYNATIVE).
    small = ms_aten.module(copy.deepcopy(module), (inputs["input_ids"],), {"use_cache": False})
    with pytest.raises(TypeError, match=r"unexpected keyword input 'attention_mak'; it was "
                                        r"captured with input_ids, use_cache=False"):
        Misuse(small, "attention_mak", False)(ids)
    with pytest.raises(TypeError, match=r"input 'use_cache' differs from the capture's constant "
                                        r"False"):
        Misuse(small, "input_ids", True)(ids)
    # The cell still works, by keyword and leaving the constant out.
    assert_tree_close(cell(input_ids=ids, attention_mask=mask),
                      dict(module(**inputs, use_cache=False)))
    want = module(inputs["input_ids"], use_cache=False).logits
    np.testing.assert_allclose(Misuse(small, "input_ids", False)(ids).asnumpy(),
                               want.detach().numpy(), rtol=1e-4, atol=1e-5)


def test_another_nesting_is_an_error_naming_the_input():
    module = Nested()
    xs, extra = nested_inputs()
    set_mode("pynative")
    cell = ms_aten.module(module, (xs, extra))
    three = [to_ms(x) for x in (*xs, xs[0])]
    with pytest.raises(TypeError, match=r"input 'xs' is list\(\*, \*, \*\), where the capture's "
                                        r"was list\(\*, \*\)"):
        cell(three, {"gate": to_ms(extra["gate"])})
    with pytest.raises(TypeError, match=r"'Nested' has no input 'gates'; its inputs: xs, extra, "
                                        r"scale, bias"):
        ms_aten.module(module, (xs,), {"gates": extra})


@pytest.mark.parametrize("mode", MODES)
def test_a_function_takes_keyword_inputs_and_returns_a_dict(mode):
    def attend(q, k, *, scale: float, mask: torch.Tensor | None = None):
        scores = q @ k.transpose(-1, -2) * scale
        if mask is not None:
            scores = scores.masked_fill(~mask, -1e9)
        return {"weights": scores.softmax(-1), "scores": scores}

    torch.manual_seed(2)
    q, k = torch.randn(2, 5, 8), torch.randn(2, 5, 8)
    mask = torch.rand(2, 5, 5) > 0.3
    fn = ms_aten.function(attend, (q, k), {"scale": 0.5, "mask": mask},
                          dynamic_shapes={"q": {1: Dim("s")}, "k": {1: Dim("s")},
                                          "mask": {1: Dim("s"), 2: Dim("s")}})
    set_mode(mode)
    for s in (5, 3):
        q, k, mask = torch.randn(2, s, 8), torch.randn(2, s, 8), torch.rand(2, s, s) > 0.3
        got = fn(to_ms(q), k=to_ms(k), mask=to_ms(mask))
        assert_tree_close(got, attend(q, k, scale=0.5, mask=mask))
        assert to_torch(got["weights"]).shape == (2, s, s)
