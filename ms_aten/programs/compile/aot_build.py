"""AOTInductor builds of fx graphs, in this process or in a process of its own.

A training compile builds two libraries, the forward's and the backward's, and most of each
build is g++ compiling AOTInductor's C++ wrapper: 6.6 and 8.8 s of GPT-2 medium's 25 s
(4 layers; 5.7 and 6.8 s for a 2-layer GPT-2: the wrapper's runtime headers, not the model,
take the time). Inductor cannot build two graphs at once in one process (`aot_compile` patches
its process-wide config, the output path included), so `aot_compile_all` builds one graph in a
second process while this one builds the other, and the two builds share the machine's cores.

The second process runs this file as a script, `python -P`: it imports torch and nothing of
ms_aten, MindSpore or this folder. It gets the graph pickled, Inductor's config as this process
has it (the thread count the code is generated for included), and its example inputs' shapes,
strides and dtypes (zeros are made there: the values are never read). A graph that calls ops
outside ATen (a user's extension, loaded in this process only) is built here.
"""
from __future__ import annotations

import logging
import shutil
import subprocess
import sys
from pathlib import Path

import torch

LOG = logging.getLogger("ms_aten")
# The namespaces of the ops a second process knows without loading anything but torch.
_TORCH_NAMESPACES = frozenset({"aten", "prims"})


def aot_compile(gm: torch.fx.GraphModule, examples: list[torch.Tensor], directory: Path,
                name: str) -> str:
    """Compiles gm into directory/name/name.so, the generated C++ beside it; returns the .so's
    path relative to `directory`."""
    import torch._inductor  # here, not at import: it imports TorchDynamo, a quarter of ms_aten's

    folder = directory / name
    folder.mkdir()
    torch._inductor.aot_compile(gm, tuple(examples),
                                options={"aot_inductor.output_path": str(folder / f"{name}.so")})
    # The custom ops the code calls through AOTInductor's proxy executor are described in a
    # JSON file, which the runner looks for beside the .so, under its name.
    for described in folder.glob("*.wrapper.json"):
        described.rename(folder / f"{name}.json")
    return f"{name}/{name}.so"


def aot_compile_all(graphs: dict[str, tuple[torch.fx.GraphModule, list[torch.Tensor]]],
                    directory: Path) -> dict[str, str]:
    """aot_compile of each (graph, examples) under its name; each but the last in a process
    of its own, all at once. A graph that a second process cannot build, or that failed there,
    is built here after the others."""
    *others, (last, (gm, examples)) = graphs.items()
    builds = {name: _Build.start(graph, inputs, directory, name) if separable(graph) else None
              for name, (graph, inputs) in others}
    try:
        paths = {last: aot_compile(gm, examples, directory, last)}
        for name, build in builds.items():
            path = build.result() if build is not None else None
            paths[name] = path or aot_compile(*graphs[name], directory, name)
    finally:
        for build in filter(None, builds.values()):
            build.close()
    return {name: paths[name] for name in graphs}


class _Build:
    """aot_compile(gm, examples, directory, name) running in a process of its own: its request
    (the pickled graph) and its output log lie in `directory` while it runs."""

    def __init__(self, directory: Path, name: str) -> None:
        self.directory, self.name = directory, name
        self.request = directory / f"{name}.request.pt"
        self.log = directory / f"{name}.log"
        self.process: subprocess.Popen | None = None

    @classmethod
    def start(cls, gm: torch.fx.GraphModule, examples: list[torch.Tensor], directory: Path,
              name: str) -> _Build | None:
        """The build started, or None (logged) if the graph cannot be handed over or no
        process starts."""
        build = cls(directory, name)
        try:
            torch.save({"graph": gm, "config": torch._inductor.config.save_config_portable(),
                        "examples": [(tuple(x.shape), tuple(x.stride()),
                                      str(x.dtype).removeprefix("torch.")) for x in examples]},
                       build.request)
            with build.log.open("wb") as log:
                build.process = subprocess.Popen(
                    [sys.executable, "-P", __file__, str(build.request), str(directory), name],
                    stdout=log, stderr=subprocess.STDOUT)
        except Exception as error:  # noqa: BLE001  (whatever pickling a graph raises; OSError)
            LOG.info("ms_aten: %s is built after the others: %s", name, error)
            build.close()
            return None
        return build

    def result(self) -> str | None:
        """The .so's path relative to the directory once the build is done; None (logged, and
        its folder cleared) if it failed."""
        assert self.process is not None  # start() returns only started builds
        code = self.process.wait()
        output = self.log.read_text(errors="replace")
        self.log.unlink()
        if code != 0:
            tail = "\n".join(output.strip().splitlines()[-5:])
            LOG.info("ms_aten: building %s in a second process failed (exit code %d), it is "
                     "built here: %s", self.name, code, tail)
            shutil.rmtree(self.directory / self.name, ignore_errors=True)
            return None
        return f"{self.name}/{self.name}.so"

    def close(self) -> None:
        """Stops the build if it still runs (this process gave up first); removes its request
        and its log (result() has removed a log it read)."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.request.unlink(missing_ok=True)
        self.log.unlink(missing_ok=True)


def separable(gm: torch.fx.GraphModule) -> bool:
    """Whether a second process can build gm: every op it calls is torch's own."""
    return all(node.target.namespace in _TORCH_NAMESPACES for node in gm.graph.nodes
               if node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload))


def _zeros(shape: tuple[int, ...], stride: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """Zeros with this shape and stride, in calloc'd memory that nothing touches."""
    size = 0 if 0 in shape else 1 + sum((n - 1) * s for n, s in zip(shape, stride, strict=True))
    return torch.zeros(size, dtype=dtype).as_strided(shape, stride)


def _main(request: str, directory: str, name: str) -> None:
    import torch._inductor  # before the graph is unpickled: unpickling traces, which needs its ops

    spec = torch.load(request, weights_only=False)  # written by _Build, in this user's folder
    torch._inductor.config.load_config(spec["config"])
    examples = [_zeros(shape, stride, getattr(torch, dtype))
                for shape, stride, dtype in spec["examples"]]
    with torch.no_grad():
        aot_compile(spec["graph"], examples, Path(directory), name)


if __name__ == "__main__":
    _main(*sys.argv[1:])
