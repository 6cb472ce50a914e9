"""What the benchmark families share: worker processes, timing, the machine record."""
