"""Throughput benchmarks (scheduler_perf-like workloads) and the CEL micro-benchmark."""
