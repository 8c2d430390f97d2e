"""Differential testing of policyd against the real kube-scheduler 1.20.2 (see README.md here)."""
