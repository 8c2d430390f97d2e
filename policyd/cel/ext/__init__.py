"""cel-go's extension libraries as Kubernetes enables them (strings, lists, sets, math, encoders, network)."""
