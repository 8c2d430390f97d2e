"""Repository tools beside `policyd bench`: the CEL micro-benchmark (vs cel-python) and hot-reload latency."""
