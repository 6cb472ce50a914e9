"""What the benchmark families share: worker processes, timing, the machine record, torch's
profiler on every thread."""
