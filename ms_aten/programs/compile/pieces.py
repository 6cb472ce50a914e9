"""A captured graph with opaque torch calls, cut into the pieces around them, for a compiled
backward (compiled.py's training route).

AOTAutograd's joint trace cannot differentiate a region's Python (capture/opaque.py), so a
training graph with regions is not compiled whole: each piece of captured ops between regions is
compiled (its forward and backward, as a whole graph is) into an `ms_aten::compiled` node of its
own, and the region nodes stay as they are between them. The program's backward then runs
through the pieces' compiled backwards and each region's torch autograd alike, as its
interpreted backward runs through any node's.

A node's piece is its level: the number of regions its value depends on in a chain (a node
that reads no region's output is in piece 0; a region runs after the piece of its inputs'
highest level, and what reads its outputs is one level higher). So a captured op that depends
on no region joins the first piece, wherever the graph lists it: a graph with one region has at
most two pieces, the one before it and the one after.
"""
from __future__ import annotations

import operator
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch


@dataclass
class Piece:
    """The captured ops of one level, in graph order, with the values it reads from outside
    (the graph's inputs, an earlier piece's or a region's outputs) and those read outside it."""

    nodes: list[torch.fx.Node] = field(default_factory=list)
    inputs: list[torch.fx.Node] = field(default_factory=list)
    outputs: list[torch.fx.Node] = field(default_factory=list)

    def module(self, root: torch.fx.GraphModule) -> torch.fx.GraphModule:
        """The piece as a graph of its own: its inputs in, its outputs out (a tuple)."""
        graph = torch.fx.Graph()
        values: dict[torch.fx.Node, torch.fx.Node] = {}
        for node in self.inputs:
            values[node] = graph.placeholder(node.name)
            values[node].meta = dict(node.meta)
        for node in self.nodes:
            values[node] = graph.node_copy(node, values.__getitem__)
        graph.output(tuple(values[node] for node in self.outputs))
        return torch.fx.GraphModule(root, graph)


@dataclass
class Step:
    """What runs at one level: its piece (possibly empty), then the region nodes that read it
    (each opaque call followed by the getitems of its results)."""

    piece: Piece
    regions: list[torch.fx.Node] = field(default_factory=list)


def split(graph: torch.fx.Graph, is_region: Callable[[torch.fx.Node], bool]) -> list[Step]:
    """The graph's call_function and get_attr nodes, each in its level's piece or region list."""
    level: dict[torch.fx.Node, int] = {}
    steps: list[Step] = []
    for node in graph.nodes:
        if node.op in ("placeholder", "output"):
            level[node] = 0
            continue
        base = max((level[a] for a in node.all_input_nodes), default=0)
        region_result = node.op == "call_function" and node.target is operator.getitem and \
            isinstance(node.args[0], torch.fx.Node) and is_region(node.args[0])
        # A region's results are one level above it: what reads them runs after it.
        level[node] = base + 1 if region_result else base
        while len(steps) <= base:
            steps.append(Step(Piece()))
        if is_region(node) or region_result:
            steps[base].regions.append(node)
        else:
            steps[base].piece.nodes.append(node)
    for step in steps:
        members = set(step.piece.nodes)
        inputs: dict[torch.fx.Node, None] = {}
        for node in step.piece.nodes:
            inputs.update(dict.fromkeys(a for a in node.all_input_nodes if a not in members))
        step.piece.inputs = list(inputs)
        step.piece.outputs = [node for node in step.piece.nodes
                              if any(user not in members for user in node.users)]
    return steps


def nodes_of(steps: list[Step]) -> Iterator[torch.fx.Node]:
    for step in steps:
        yield from step.piece.nodes
        yield from step.regions
