"""Kubernetes' own CEL libraries (k8s.io/apiserver/pkg/cel/library), authorizer-free parts."""
