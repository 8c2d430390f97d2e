"""Compiled CEL (policyd) vs cel-python on scheduler-like expressions: prints microseconds per evaluation."""

from __future__ import annotations

import timeit
from typing import Any

import celpy

from policyd.cel.program import compile_expression, standard_env
from policyd.cel.types import INT, STRING, ObjectType, list_of, map_of

EXPRESSIONS = [
    "node.free.cpu >= pod.requests.cpu",
    "node.free.memory >= pod.requests.memory && node.free.cpu >= pod.requests.cpu",
    "(node.allocatable.cpu - node.requested.cpu) * 100 / node.allocatable.cpu",
    "'gpu' in node.labels && node.labels['gpu'] == 'true'",
    "pod.priority > 100 ? 10 : 1",
    "node.taints.all(t, t.effect != 'NoSchedule')",
    "node.taints.exists(t, t.key == 'dedicated' && t.value == 'gpu')",
    "pod.labels['team'].startsWith('ml-')",
    "size(node.taints) == 0 || pod.priority >= 1000",
    "node.requested.cpu * 100 / node.allocatable.cpu + node.requested.memory * 100 / node.allocatable.memory",
]

POD = ObjectType(
    "Pod",
    {"priority": INT, "requests": map_of(STRING, INT), "labels": map_of(STRING, STRING), "name": STRING},
)
NODE = ObjectType(
    "Node",
    {
        "free": map_of(STRING, INT),
        "allocatable": map_of(STRING, INT),
        "requested": map_of(STRING, INT),
        "labels": map_of(STRING, STRING),
        "taints": list_of(map_of(STRING, STRING)),
    },
)
POD_VALUE: dict[str, Any] = {
    "priority": 500,
    "requests": {"cpu": 500, "memory": 1 << 30},
    "labels": {"team": "ml-infra"},
    "name": "p",
}
NODE_VALUE: dict[str, Any] = {
    "free": {"cpu": 3000, "memory": 8 << 30},
    "allocatable": {"cpu": 4000, "memory": 16 << 30},
    "requested": {"cpu": 1000, "memory": 8 << 30},
    "labels": {"gpu": "true", "zone": "a"},
    "taints": [{"key": "dedicated", "value": "gpu", "effect": "PreferNoSchedule"}],
}


def _per_eval_us(fn: Any) -> float:
    timer = timeit.Timer(fn)
    n, _ = timer.autorange()
    best = min(timer.repeat(repeat=3, number=max(n, 1)))
    return best / max(n, 1) * 1e6


def main() -> None:
    """Run the comparison and print one line per expression plus the overall ratio."""
    env = standard_env({"pod": POD, "node": NODE})
    celpy_env = celpy.Environment(annotations={"pod": celpy.celtypes.MapType, "node": celpy.celtypes.MapType})
    activation = {"pod": celpy.json_to_cel(POD_VALUE), "node": celpy.json_to_cel(NODE_VALUE)}
    total_ours = total_theirs = 0.0
    print(f"{'expression':80} {'policyd us':>11} {'cel-python us':>14} {'ratio':>8}")
    for text in EXPRESSIONS:
        compiled = compile_expression(text, env)
        args = [{"pod": POD_VALUE, "node": NODE_VALUE}[p] for p in compiled.params]
        fn = compiled.fn
        ours = _per_eval_us(lambda fn=fn, args=args: fn(*args))
        program = celpy_env.program(celpy_env.compile(text))
        theirs = _per_eval_us(lambda program=program: program.evaluate(activation))
        total_ours += ours
        total_theirs += theirs
        print(f"{text[:80]:80} {ours:11.3f} {theirs:14.1f} {theirs / ours:7.0f}x")
    print(f"{'TOTAL':80} {total_ours:11.3f} {total_theirs:14.1f} {total_theirs / total_ours:7.0f}x")


if __name__ == "__main__":
    main()
