"""The keys that moved between two pods' pod-only values (`policyd.evaluation.map_keys`): only leaf
maps' key sets may differ; anything else gives None."""

from __future__ import annotations

from typing import Any

from policyd.cel.types import BOOL, INT, STRING, ListType, MapType, ObjectType, list_of, map_of
from policyd.evaluation import map_keys
from policyd.evaluation.map_keys import Memo, moved_keys
from policyd.evaluation.sameness import Unset
from policyd.policy.cluster_decls import POD_AFFINITY_STATE

COUNTS = map_of(STRING, INT)


def state(anti: dict[str, int], existing: dict[str, int], any_match: bool = False) -> dict[str, object]:
    return {
        "required": [],
        "anyMatch": any_match,
        "selfMatch": False,
        "anti": [{"topologyKey": "kubernetes.io/hostname", "counts": anti}],
        "existingAnti": {"kubernetes.io/hostname": existing},
    }


def test_keys_added_and_removed_in_leaf_maps_are_the_moved_keys() -> None:
    old = state({"n1": 1, "n2": 1}, {"n1": 1})
    new = state({"n1": 2, "n3": 1}, {"n1": 1, "n4": 1})
    # a count that changed under a kept key is not read by the rules followed: not a moved key
    assert moved_keys((old,), (new,), (POD_AFFINITY_STATE,)) == {"n2", "n3", "n4"}
    assert moved_keys((old,), (old,), (POD_AFFINITY_STATE,)) == frozenset()


def test_anything_else_that_differs_gives_none() -> None:
    old = state({"n1": 1}, {"n1": 1})
    assert moved_keys((old,), (state({"n1": 1}, {"n1": 1}, any_match=True),), (POD_AFFINITY_STATE,)) is None
    longer = state({"n1": 1}, {"n1": 1})
    longer["anti"] = [*longer["anti"], {"topologyKey": "zone", "counts": {}}]  # type: ignore[list-item]
    assert moved_keys((old,), (longer,), (POD_AFFINITY_STATE,)) is None
    other_key = state({"n1": 1}, {"n1": 1})
    other_key["existingAnti"] = {"zone": {"n1": 1}}
    assert moved_keys((old,), (other_key,), (POD_AFFINITY_STATE,)) is None  # not a leaf map's keys
    renamed = state({"n1": 1}, {"n1": 1})
    renamed["anti"][0]["topologyKey"] = "zone"  # type: ignore[index]
    assert moved_keys((old,), (renamed,), (POD_AFFINITY_STATE,)) is None
    assert moved_keys((1,), (1.0,), (INT,)) is None  # equal, of other types
    assert moved_keys((["a"],), (["a", "b"],), (list_of(STRING),)) is None


def test_values_not_of_their_declared_shape_or_not_computed_give_none() -> None:
    assert moved_keys(Unset(), ({"a": 1},), (COUNTS,)) is None
    assert moved_keys(({"a": 1},), ([],), (COUNTS,)) is None
    assert moved_keys(({"a": 1},), ({"a": 1}, True), (COUNTS,)) is None
    assert moved_keys(({"a": 1}, True), ({"b": 1}, True), (COUNTS, BOOL)) == {"a", "b"}
    assert moved_keys(({1: 1},), ({2: 1},), (map_of(INT, INT),)) == frozenset()  # no label is a number


def test_a_memo_answers_the_same_pair_of_values_again() -> None:
    memo: Memo = {}
    old, new = {"a": 1}, {"a": 1, "b": 1}
    assert moved_keys((old,), (new,), (COUNTS,), memo) == {"b"}
    new["c"] = 1  # the same objects: the memo's answer stands
    assert moved_keys((old,), (new,), (COUNTS,), memo) == {"b"}
    assert moved_keys((old,), (dict(new),), (COUNTS,), memo) == {"b", "c"}


def test_whether_a_type_may_carry_is_kept_per_type_object(monkeypatch: Any) -> None:
    # two types of one name and shape of fields but other field types; and more types than kept
    monkeypatch.setattr(map_keys, "MAX_TYPES", 2)
    carrying = ObjectType(name="s", fields={"f": MapType(STRING, INT)})
    plain = ObjectType(name="s", fields={"f": STRING})
    listed = ListType(carrying)
    for _ in range(2):
        assert map_keys.may_carry(carrying) and not map_keys.may_carry(plain) and map_keys.may_carry(listed)
    assert len(map_keys._carrying) <= 2
