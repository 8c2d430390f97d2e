"""`NodeColumns` follows the rows the scheduler rewrites (pods added and removed, labels changed)."""

from __future__ import annotations

from policyd.evaluation.columns import NodeColumns
from tests.unit.evaluation.test_plans import make_node, make_pod


def test_columns_follow_rewritten_rows() -> None:
    state = make_node(0, 4000, 1024, 10, {"zone": "a"}, [], None, False)
    columns = NodeColumns.from_nodes([state.cel])
    pod = make_pod("p", 500, 128)
    state.add_pod(pod.with_node("n0"))
    columns.set_node(0, state.cel)
    free, present = columns.free("cpu")
    assert free[0] == state.cel["free"]["cpu"] == 3500 and present[0]
    assert columns.pod_count[0] == state.cel["podCount"] == 1
    state.remove_pod(pod.with_node("n0"))
    columns.set_node(0, state.cel)
    assert columns.free("cpu")[0][0] == 4000 and columns.pod_count[0] == 0
    columns.set_node(0, make_node(0, 2000, 1024, 10, {"zone": "b"}, [], None, False).cel)
    assert columns.labels["zone"].values[columns.labels["zone"].codes[0]] == "b"


def test_a_copy_of_the_row_is_rewritten_where_its_amounts_differ() -> None:
    # the snapshot's rows are copies: an assume and the bind that confirms it give copies of equal
    # amounts (nothing to rewrite), another pod copies of other amounts
    state = make_node(0, 4000, 1024, 10, {"zone": "a"}, [], None, False)
    columns = NodeColumns.from_nodes([state.clone_without(()).cel])
    state.add_pod(make_pod("p", 500, 128).with_node("n0"))
    columns.set_node(0, state.clone_without(()).cel)
    columns.set_node(0, state.clone_without(()).cel)
    assert columns.free("cpu")[0][0] == 3500 and columns.column("requested", "cpu")[0][0] == 500
    state.add_pod(make_pod("q", 1000, 128).with_node("n0"))
    columns.set_node(0, state.clone_without(()).cel)
    assert columns.free("cpu")[0][0] == 2500 and columns.column("requested", "cpu")[0][0] == 1500
    assert columns.column("nonZeroRequested", "cpu")[0][0] == 1500 and columns.pod_count[0] == 2
