"""The known name a misspelt one was meant to be."""

from __future__ import annotations

import pytest

from policyd.slips import did_you_mean, near_name

KNOWN = ("nodeName", "nodeSelector", "tolerations", "requests", "labels")


@pytest.mark.parametrize(
    ("name", "near"),
    [
        ("nodename", "nodeName"),  # another case
        ("nodeNme", "nodeName"),  # a letter left out
        ("nodeNaame", "nodeName"),  # a letter added
        ("nodeNmae", "nodeName"),  # two swapped
        ("lbaels", "labels"),  # two swapped in a short name (difflib's ratio: 0.67)
        ("nodeSelectr", "nodeSelector"),
        ("requsts", "requests"),
        ("lables", "labels"),
        ("toleration", "tolerations"),
        ("selector", None),  # a part of a known name is another name
        ("frobnicate", None),
    ],
)
def test_a_slip_is_matched_to_the_known_name(name: str, near: str | None) -> None:
    assert near_name(name, KNOWN) == near


def test_the_ratio_takes_longer_slips_and_none_leaves_them_out() -> None:
    assert near_name("nodeSlecter", KNOWN) == "nodeSelector"  # two letters moved
    assert near_name("nodeSlecter", KNOWN, ratio=None) is None
    assert near_name("nodeSel", KNOWN) is None
    assert near_name("nodeSel", KNOWN, ratio=0.6) == "nodeSelector"


def test_did_you_mean_ends_a_message_only_with_a_slip() -> None:
    assert did_you_mean("labels") == " (did you mean 'labels'?)"
    assert did_you_mean(None) == ""
