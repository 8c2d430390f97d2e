"""`policyd playground [--port P] [--host H]`: a page on localhost to edit, lint and run policies.

The page's Run is `run_request`: the policy text compiled as files are, the cluster text loaded as a
cluster file, and the pending pods scheduled by `simulate.run_simulation` (explain mode on), the
placements read by `simulate.placements`: the code path of `policyd simulate --explain`.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from policyd.backends.simulated import SimulatedCluster
from policyd.commands.simulate import MAX_ATTEMPTS, Simulation, explained_pod, placements, run_simulation
from policyd.playground import session
from policyd.playground.server import DEFAULT_ADDRESS, DEFAULT_PORT, Limits, PlaygroundServer


def run_request(doc: Any) -> dict[str, Any]:
    """`POST /api/run`: the simulate report (placements, victims, summary) and `explained`, the heatmap
    of the requested pod (default: the pod `simulate --explain` shows) at its last attempt."""
    request = session.run_input(doc)
    policies = session.compiled_policies(request.policy)
    cluster = SimulatedCluster.from_objects(session.load_cluster(request.cluster_name, request.cluster_text))
    scheduler = run_simulation(policies, cluster, request.seed, True, MAX_ATTEMPTS)
    sim = Simulation(scheduler, cluster, placements(scheduler, cluster), 0.0)
    key = request.pod if request.pod is not None else explained_pod(sim)
    if key is not None and key not in {p.pod for p in sim.placements}:
        raise session.RequestError(f"pod {key} is not a pending pod of this cluster")
    attempts = [a for a in scheduler.attempts.for_pod(key) if a.nodes] if key is not None else []
    report = sim.report()
    report["explained"] = session.heatmap(attempts[-1]) if attempts else None
    return report


def server(address: str, port: int, limits: Limits | None = None) -> PlaygroundServer:
    """The playground server answering lint with `session.lint` and run with `run_request`."""
    return PlaygroundServer(session.lint, run_request, address, port, limits or Limits())


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the command's arguments."""
    parser.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT}; 0: any)"
    )
    parser.add_argument(
        "--host",
        default=DEFAULT_ADDRESS,
        help=f"address to bind (default {DEFAULT_ADDRESS}: this machine only; the page runs policies here)",
    )
    parser.add_argument(
        "--run-timeout",
        type=float,
        default=Limits.run_seconds,
        help="seconds a run may take (default %(default)s)",
    )


def run(args: argparse.Namespace) -> int:
    """Serve the playground until interrupted; returns the exit code."""
    try:
        playground = server(args.host, args.port, Limits(run_seconds=args.run_timeout))
    except OSError as exc:
        print(
            f"policyd playground: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}",
            file=sys.stderr,
        )
        return 1
    print(f"policyd playground: serving {playground.url} (Ctrl-C to stop)", flush=True)
    try:
        playground.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        playground.stop()
    return 0
