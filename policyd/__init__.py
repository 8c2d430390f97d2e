"""policyd: a Kubernetes scheduler whose scheduling logic is declarative policy."""

__version__ = "0.1.0"
