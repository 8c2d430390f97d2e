"""Kubernetes' CEL library test cases (transcribed data; see README.md)."""
