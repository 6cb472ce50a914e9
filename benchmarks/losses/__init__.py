"""Loss benchmark: torch.nn's cross entropy through ms_aten.nn against MindSpore's own and torch
eager's."""
