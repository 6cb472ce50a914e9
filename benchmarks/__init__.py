"""ms_aten's benchmarks, by family: ops/ (one ATen op against MindSpore's native op and other
routes), models/ (whole models against torch eager), dynamic/ (dynamic shapes: decoding and
training over changing lengths); common/ holds what they share. Each family's driver is its
run.py, run as a module from the repository root (`python -m benchmarks.models.run`); it starts
its workers, worker_torch.py and worker_ms_aten.py, as modules in fresh processes."""
