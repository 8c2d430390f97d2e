"""Compiled CEL (policyd) vs cel-python on scheduler-like expressions: prints microseconds per evaluation.

The second table uses library functions (strings, regex, lists, IP/CIDR, URL, semver). cel-python has
none of them, so it gets policyd's implementations as extension functions (`Environment.program(...,
functions=...)`, wrapped to convert cel-python's value types): both sides run the same function bodies
and the figures compare the evaluators around them.
"""

from __future__ import annotations

import timeit
from collections.abc import Callable
from typing import Any

import celpy

from policyd.cel import regex
from policyd.cel.ext import network, strings
from policyd.cel.k8s_lib import lists, semver, url
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

LIBRARY_EXPRESSIONS = [
    "pod.labels['team'].matches('^ml-[a-z]+$')",
    "pod.name.lowerAscii().split('-').size() == 1",
    "'%s/%s'.format([pod.labels['team'], pod.name]) == 'ml-infra/p'",
    "pod.labels['team'].find('[a-z]+$') == 'infra'",
    "node.taints.map(t, t.key).join(',') == 'dedicated'",
    "[node.free.cpu, node.free.memory].sum() > 0",
    "cidr('10.0.0.0/8').containsIP(ip(node.labels['ip']))",
    "url(node.labels['registry']).getHostname() == 'registry.example.com'",
    "semver(node.labels['version']).isGreaterThan(semver('1.27.0'))",
]


def _from_celpy(v: Any) -> Any:
    """A cel-python value as the plain Python value policyd's functions take."""
    if isinstance(v, bool):
        return bool(v)
    if isinstance(v, int):
        return int(v)
    if isinstance(v, str):
        return str(v)
    if isinstance(v, list):
        return [_from_celpy(x) for x in v]
    return v


def _to_celpy(v: Any) -> Any:
    if isinstance(v, bool):
        return celpy.celtypes.BoolType(v)
    if isinstance(v, int):
        return celpy.celtypes.IntType(v)
    if isinstance(v, str):
        return celpy.celtypes.StringType(v)
    if isinstance(v, list):
        return celpy.celtypes.ListType([_to_celpy(x) for x in v])
    return v


def _for_celpy(fn: Callable[..., Any]) -> Callable[..., Any]:
    def call(*args: Any) -> Any:
        return _to_celpy(fn(*(_from_celpy(a) for a in args)))

    return call


CELPY_FUNCTIONS = {
    name: _for_celpy(fn)
    for name, fn in {
        "lowerAscii": strings.lower_ascii,
        "split": strings.split,
        "format": strings.format_string,
        "join": strings.join,
        "find": regex.find,
        "sum": lists.list_sum,
        "ip": network.ip,
        "cidr": network.cidr,
        "containsIP": network.contains_ip,
        "url": url.url,
        "getHostname": url.get_hostname,
        "semver": semver.semver,
        "isGreaterThan": semver.is_greater_than,
    }.items()
}
"""policyd's library functions for cel-python, which has none of them."""

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
    "labels": {
        "gpu": "true",
        "zone": "a",
        "ip": "10.1.2.3",
        "registry": "https://registry.example.com:5000/v2/",
        "version": "1.28.3",
    },
    "taints": [{"key": "dedicated", "value": "gpu", "effect": "PreferNoSchedule"}],
}


def _per_eval_us(fn: Any) -> float:
    timer = timeit.Timer(fn)
    n, _ = timer.autorange()
    best = min(timer.repeat(repeat=3, number=max(n, 1)))
    return best / max(n, 1) * 1e6


def _compare(title: str, expressions: list[str], functions: dict[str, Callable[..., Any]]) -> float:
    """Print one line per expression and the total; returns the overall ratio."""
    env = standard_env({"pod": POD, "node": NODE})
    celpy_env = celpy.Environment(annotations={"pod": celpy.celtypes.MapType, "node": celpy.celtypes.MapType})
    activation = {"pod": celpy.json_to_cel(POD_VALUE), "node": celpy.json_to_cel(NODE_VALUE)}
    total_ours = total_theirs = 0.0
    print(f"{title:80} {'policyd us':>11} {'cel-python us':>14} {'ratio':>8}")
    for text in expressions:
        compiled = compile_expression(text, env)
        args = [{"pod": POD_VALUE, "node": NODE_VALUE}[p] for p in compiled.params]
        fn = compiled.fn
        program = celpy_env.program(celpy_env.compile(text), functions=functions or None)
        ours_value, theirs_value = fn(*args), program.evaluate(activation)
        if ours_value != theirs_value:
            raise AssertionError(f"{text}: policyd {ours_value!r} != cel-python {theirs_value!r}")
        ours = _per_eval_us(lambda fn=fn, args=args: fn(*args))
        theirs = _per_eval_us(lambda program=program: program.evaluate(activation))
        total_ours += ours
        total_theirs += theirs
        print(f"{text[:80]:80} {ours:11.3f} {theirs:14.1f} {theirs / ours:7.0f}x")
    print(f"{'TOTAL':80} {total_ours:11.3f} {total_theirs:14.1f} {total_theirs / total_ours:7.0f}x")
    return total_theirs / total_ours


def main() -> None:
    """Run both comparisons (standard expressions; library functions) and print the ratios."""
    _compare("expression", EXPRESSIONS, {})
    print()
    _compare("expression with library functions", LIBRARY_EXPRESSIONS, CELPY_FUNCTIONS)


if __name__ == "__main__":
    main()
