"""Benchmarks: the cost of saga_runtime measured against a floor taken in the same run (`python -m benchmarks`)."""
