"""`policyd snapshot`: write a cluster file of a live cluster (read-only: list calls only).

Also the live-cluster flags `simulate`, `explain` and `diff` share (`--from-cluster`, `--kubeconfig`,
`--context`) and the one way they read a live cluster.
"""

from __future__ import annotations

import argparse
import sys

from policyd.backends.cluster_file import ClusterObjects
from policyd.backends.kube.client import ApiError, KubeClient
from policyd.backends.kube.snapshot import read_cluster, read_objects, render, snapshot_document
from policyd.errors import PolicydError


def add_kube_arguments(parser: argparse.ArgumentParser) -> None:
    """`--kubeconfig` and `--context`: which cluster to read."""
    parser.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster, then ~/.kube/config)")
    parser.add_argument("--context", help="kubeconfig context (default: the current context)")


def add_live_arguments(parser: argparse.ArgumentParser) -> None:
    """`--from-cluster` with `--kubeconfig` / `--context` (either implies `--from-cluster`)."""
    parser.add_argument(
        "--from-cluster",
        action="store_true",
        help="read the live cluster (read-only) instead of a cluster file; implied by --kubeconfig/--context",
    )
    add_kube_arguments(parser)


def wants_live(args: argparse.Namespace) -> bool:
    """True when the command reads a live cluster."""
    return bool(args.from_cluster or args.kubeconfig or args.context)


def connect(args: argparse.Namespace) -> KubeClient:
    """A client for the cluster of `--kubeconfig` / `--context` (PolicydError naming the kubeconfig)."""
    return KubeClient.connect(args.kubeconfig or None, context=args.context or None)


def read_live(args: argparse.Namespace) -> ClusterObjects:
    """The live cluster's objects (PolicydError: kubeconfig, unreachable server, missing permission)."""
    client = connect(args)
    try:
        return read_cluster(client)
    except ApiError as err:
        raise _unreachable(client, err) from None
    finally:
        client.close()


def _unreachable(client: KubeClient, err: ApiError) -> PolicydError:
    if err.status == 0:
        return PolicydError(f"cannot talk to the API server at {client.host}: {err}")
    return err


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the command's arguments."""
    add_kube_arguments(parser)
    parser.add_argument(
        "-o",
        "--output",
        default="-",
        help="output file (default: stdout); a name ending in .json writes JSON",
    )


def run(args: argparse.Namespace) -> int:
    """Run the command; returns the exit code."""
    try:
        client = connect(args)
        try:
            objects = read_objects(client)
        except ApiError as err:
            raise _unreachable(client, err) from None
        finally:
            client.close()
    except PolicydError as err:
        print(f"policyd snapshot: error: {err}", file=sys.stderr)
        return 1
    text = render(snapshot_document(objects), "json" if args.output.endswith(".json") else "yaml")
    if args.output == "-":
        sys.stdout.write(text)
        return 0
    try:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as err:
        print(f"policyd snapshot: error: {args.output}: {err.strerror or err}", file=sys.stderr)
        return 1
    return 0
