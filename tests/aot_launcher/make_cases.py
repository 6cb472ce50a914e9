"""Writes what the AOT launcher needs from ms_aten into a folder: each op case's spec (cases.py) as
ms_aten.op makes it, and a tiny GPT-2's forward and backward as ms_aten.module captures them, with
its weights, input, output cotangent and torch's outputs and gradients (about 0.5 MB). Run it
where ms_aten (and so MindSpore) runs; scripts/gpu_check.sh takes the folder to a GPU machine:

    cd tests && ../.venv/bin/python -m aot_launcher.make_cases ../build/aot_cases

With --benchmark small (scripts/gpu_prepare.sh) it also writes GPT-2 small's program for the
benchmark (bench.py), without its weights.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
import transformers

import ms_aten
from ms_aten.native import library
from ms_aten.ops.binding import SPEC_ATTR
from ms_aten.ops.grad import AtenVjp
from ms_aten.programs.lowering.program import RNG_STATE_BYTES
from ms_aten.programs.module import TorchModule
from ms_aten.programs.runtime.family import family_spec

from .bench import FOLDER as BENCH_FOLDER
from .cases import MS_DTYPES, OP_CASES, PROGRAM, SPECS, save

FAMILY = "aot_launcher"  # the program family's id in the launcher's process


def _entry(multi_output: bool) -> str:
    """The CPU entry point MindSpore would call for the primitive (library.kernel's choice)."""
    return library.kernel("CPU", multi_output).rsplit(":", 1)[1]


def op_specs() -> dict[str, dict[str, str]]:
    """Every op case's spec attribute and entry point, as ms_aten.op's primitive holds them."""
    specs = {}
    for case in OP_CASES:
        if case.op is None:
            continue
        op = ms_aten.op(case.op, **case.constants)
        primitive = AtenVjp(op.binding) if case.vjp else op
        specs[case.name] = {"spec": primitive.attrs[SPEC_ATTR],
                            "entry": _entry(primitive.multi_output)}
    return specs


def gpt2() -> tuple[torch.nn.Module, torch.Tensor]:
    """A tiny GPT-2 with random weights, in eval mode (no dropout: one program, no RNG state)."""
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=100, n_positions=16, n_embd=32, n_layer=2,
                                     n_head=2, use_cache=False)
    return transformers.GPT2LMHeadModel(config).eval(), torch.randint(0, 100, (2, 8))


def write_program(folder: Path) -> TorchModule:
    """GPT-2's program files and manifest.json (cases.ProgramFiles); returns the Cell."""
    folder.mkdir(parents=True, exist_ok=True)
    model, tokens = gpt2()
    cell = ms_aten.module(model, kwargs={"input_ids": tokens})
    program = cell.program
    assert program.n_outputs == 1, "one output: the logits"
    # The program's inputs: the weights in TorchModule's order, then the user input.
    named = [*model.named_parameters(), *model.named_buffers()]
    inputs = [t.detach() for _, t in named] + [tokens]
    logits = model(input_ids=tokens).logits
    cotangent = torch.randn(logits.shape, generator=torch.Generator().manual_seed(1))
    model.zero_grad()
    logits.backward(cotangent)
    gradients = [t.grad if t.grad is not None else torch.zeros_like(t) for _, t in named]
    gradients.append(torch.zeros_like(tokens))

    def entries(prefix: str, tensors: list[torch.Tensor]) -> list[tuple[str, list[int], str]]:
        listed = []
        for i, t in enumerate(tensors):
            file = f"{prefix}{i}.bin"
            save(t, folder / file)
            listed.append((MS_DTYPES[t.dtype], list(t.shape), file))
        return listed

    # After the graph's outputs, the forward's states for its VJP (program.py, n_states): the
    # CPU generator's state where the graph is random (GPT-2's attention has a dropout_p), and
    # the handle of a kept graph.
    states = [("uint8", [RNG_STATE_BYTES], "rng_state.bin")] * program.random
    states.append(("int64", [1], "handle.bin"))
    reference_gradients = entries("reference_gradient", gradients)
    manifest = {
        "family": FAMILY,
        "model": f"GPT2LMHeadModel {model.config.n_layer}x{model.config.n_embd}, tokens (2, 8)",
        "inputs": entries("input", inputs),
        "outputs": [(MS_DTYPES[logits.dtype], list(logits.shape), "logits.bin"), *states],
        "cotangents": entries("cotangent", [cotangent]),
        "gradients": [(d, s, f"gradient{i}.bin") for i, (d, s, _) in enumerate(
            reference_gradients)],
        "reference_outputs": entries("reference_output", [logits.detach()]),
        "reference_gradients": reference_gradients,
    }
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=1))
    (folder / "key.txt").write_text(program.signature.describe())
    (folder / "call.spec").write_text(program.spec)
    (folder / "vjp.spec").write_text(program.vjp_spec)
    (folder / "forward.attr").write_text(family_spec("call", program, FAMILY))
    (folder / "backward.attr").write_text(family_spec("vjp", program, FAMILY))
    return cell


# The benchmark's GPT-2 sizes: small is GPT-2 small (124M parameters, transformers' default
# config); tiny, the cases' model, lets the CPU test run the benchmark's steps in seconds.
BENCHMARKS = {
    "small": ({}, (2, 128)),
    "tiny": ({"vocab_size": 100, "n_positions": 16, "n_embd": 32, "n_layer": 2, "n_head": 2},
             (2, 8)),
}


def write_benchmark(folder: Path, size: str) -> None:
    """The benchmark's program (bench.py): its specs and a manifest naming its weights, which
    the GPU machine makes from a seed (GPT-2 small's take 500 MB)."""
    folder.mkdir(parents=True, exist_ok=True)
    overrides, tokens_shape = BENCHMARKS[size]
    config = transformers.GPT2Config(**overrides, use_cache=False)
    model = transformers.GPT2LMHeadModel(config).eval()
    tokens = torch.zeros(tokens_shape, dtype=torch.int64)
    program = ms_aten.module(model, kwargs={"input_ids": tokens}).program
    assert program.n_outputs == 1, "one output: the logits"
    named = [*model.named_parameters(), *model.named_buffers()]
    states = [("uint8", [RNG_STATE_BYTES])] * program.random + [("int64", [1])]
    logits = [MS_DTYPES[program.output_dtypes[0]], list(program.output_shapes[0])]
    manifest = {
        "family": "aot_bench",
        "model": f"GPT2LMHeadModel {config.n_layer}x{config.n_embd}, "
                 f"{sum(t.numel() for _, t in named):,} parameters, tokens "
                 f"{tuple(tokens_shape)}",
        "config": {"n_layer": config.n_layer, "n_head": config.n_head,
                   "vocab_size": config.vocab_size},
        "tokens": list(tokens_shape),
        "weights": [(n, MS_DTYPES[t.dtype], list(t.shape)) for n, t in named],
        "outputs": [logits, *states],
    }
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=1))
    (folder / "key.txt").write_text(program.signature.describe())
    (folder / "call.spec").write_text(program.spec)
    (folder / "vjp.spec").write_text(program.vjp_spec)
    (folder / "forward.attr").write_text(family_spec("call", program, "aot_bench"))
    (folder / "backward.attr").write_text(family_spec("vjp", program, "aot_bench"))


def write(folder: Path, benchmark: str | None = None) -> TorchModule:
    """Every file the launcher's plan needs, and the benchmark's at `benchmark`'s size (bench.py)
    if given; returns GPT-2's Cell."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / SPECS).write_text(json.dumps(op_specs(), indent=1))
    if benchmark is not None:
        write_benchmark(folder / BENCH_FOLDER, benchmark)
    return write_program(folder / PROGRAM)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--benchmark", choices=sorted(BENCHMARKS),
                        help="also the benchmark's GPT-2 program, of this size (bench.py)")
    args = parser.parse_args()
    write(args.folder, args.benchmark)
