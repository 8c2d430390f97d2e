"""Composition: layers ordered by `extends`, overrides and disables applied once, conflicts named at both places."""

from __future__ import annotations

from pathlib import Path

import pytest

from policyd import shipped
from policyd.compiler.profiles import compile_sources
from policyd.errors import PolicyError
from policyd.policy.composition import SHIPPED_DEFAULT
from policyd.policy.loader import load_texts

DEFAULT = Path(shipped.default_policy()).read_text(encoding="utf-8")
BASE = "/p/default.policy"


def _load(**files: str) -> tuple[dict[str, object], list[str]]:
    texts = {BASE: DEFAULT, **{"/p/{}.{}".format(*name.rsplit("_", 1)): text for name, text in files.items()}}
    result = load_texts(texts)
    return dict(result.profiles), [d.format().splitlines()[0] for d in result.diagnostics]


def _errors(**files: str) -> list[str]:
    return [line for line in _load(**files)[1] if ": error: " in line]


BINPACK = """policy binpack extends default {
  override score default/NodeResourcesLeastAllocated { weight = 0 }
  disable default/ImageLocality
  score MostAllocated {
    expr = "cpu" in node.allocatable && node.allocatable["cpu"] > 0
      ? (node.requested["cpu"] + pod.requests["cpu"]) * 100 / node.allocatable["cpu"] : 0
    weight = 2
  }
}
"""

BINPACK_YAML = """apiVersion: policyd.io/v1alpha1
kind: SchedulingPolicy
metadata: {name: binpack}
spec:
  extends: default
  overrides:
    scores:
      - rule: default/NodeResourcesLeastAllocated
        weight: 0
  disable: [default/ImageLocality]
"""


@pytest.mark.parametrize("name,text", [("binpack.policy", BINPACK), ("binpack.yaml", BINPACK_YAML)])
def test_reweight_and_disable_reach_the_compiled_profile(name: str, text: str) -> None:
    compiled = compile_sources({BASE: DEFAULT, f"/p/{name}": text}, generation=1).profiles["policyd"]
    weights = {(s.rule.policy, s.rule.name): s.weight for s in compiled.scores}
    assert weights[("default", "NodeResourcesLeastAllocated")] == 0
    assert ("default", "ImageLocality") not in weights
    assert weights[("default", "TaintTolerationScore")] == 3  # untouched
    assert compiled.policies[0] == "default"  # the base layer first


def test_effective_policy_records_origin_and_changes() -> None:
    profiles, diagnostics = _load(binpack_policy=BINPACK)
    assert not [d for d in diagnostics if ": error: " in d]
    effective = profiles["policyd"]
    rules = {r.qualified: r for r in effective.rules}  # type: ignore[attr-defined]
    least = rules["default/NodeResourcesLeastAllocated"]
    assert least.weight == 0 and least.enabled
    assert [(c.policy, c.what, c.span.line) for c in least.changes] == [("binpack", "weight 1 -> 0", 2)]
    image = rules["default/ImageLocality"]
    assert not image.enabled and image.changes[0].what == "disabled" and image.changes[0].span.line == 3
    assert rules["binpack/MostAllocated"].span.line == 4


def test_override_queue_and_preemption_replace_the_base_sections() -> None:
    text = (
        "policy tenants extends default {\n"
        "  override queue { order pod.namespace asc }\n"
        "  override preemption { victims = false }\n"
        "}\n"
    )
    compiled = compile_sources({BASE: DEFAULT, "/p/t.policy": text}, generation=1).profiles["policyd"]
    assert compiled.queue_key({"namespace": "a", "priority": 5}) == ("a",)
    assert not compiled.preemption.eligible_victim({"priority": 10}, {"priority": 0})
    profiles, _ = _load(t_policy=text)
    queue = profiles["policyd"].queue  # type: ignore[attr-defined]
    assert queue.policy == "tenants" and queue.replaced[0].policy == "default"


def test_a_base_joins_the_profiles_of_the_policy_built_on_it() -> None:
    text = 'policy fair extends default {\n  profiles = ["fair-share"]\n  override queue { order pod.name asc }\n}\n'
    compiled = compile_sources({BASE: DEFAULT, "/p/f.policy": text}, generation=1)
    assert compiled.profiles["fair-share"].policies == ("default", "fair")
    assert compiled.profiles["policyd"].policies == ("default",)
    assert compiled.profiles["policyd"].queue_key({"name": "x", "priority": 5}) != ("x",)


def test_second_plain_queue_in_a_layer_that_extends_suggests_override() -> None:
    errors = _errors(q_policy="policy q extends default {\n  queue { order pod.name asc }\n}\n")
    assert len(errors) == 1
    assert "/p/q.policy:2:3: error: profile 'policyd' has a second queue section" in errors[0]
    assert "/p/default.policy:" in errors[0] and "override queue" in errors[0]


def test_override_of_nothing_is_an_error() -> None:
    errors = _errors(
        a_policy="policy a { filter F { expr = true } }\n",
        b_policy="policy b extends a {\n  override queue { order pod.name asc }\n}\n",
    )
    assert any(
        "/p/b.policy:2:12: error: override queue in policy 'b': no policy it extends" in e for e in errors
    )


def test_unordered_overrides_of_the_same_thing_name_both_places() -> None:
    errors = _errors(
        a_policy="policy a extends default {\n  override score default/ImageLocality { weight = 2 }\n}\n",
        b_policy="policy b extends default {\n  override score default/ImageLocality { weight = 3 }\n}\n",
    )
    assert errors == [
        "/p/b.policy:2:18: error: policies 'a' and 'b' both change default/ImageLocality and neither "
        "extends the other (the other change is at /p/a.policy:2:18)"
    ]


def test_ordered_overrides_take_the_later_layer() -> None:
    a = "policy a extends default {\n  override score default/ImageLocality { weight = 2 }\n}\n"
    b = "policy b extends a {\n  override score default/ImageLocality { weight = 7 }\n}\n"
    compiled = compile_sources({BASE: DEFAULT, "/p/a.policy": a, "/p/b.policy": b}, generation=1)
    profile = compiled.profiles["policyd"]
    assert profile.policies == ("default", "a", "b")
    assert {s.rule.name: s.weight for s in profile.scores}["ImageLocality"] == 7


def test_disabled_and_reweighted_is_an_error_naming_both() -> None:
    errors = _errors(
        a_policy="policy a extends default {\n  disable default/ImageLocality\n}\n",
        b_policy="policy b extends a {\n  override score default/ImageLocality { weight = 3 }\n}\n",
    )
    assert errors == [
        "/p/b.policy:2:18: error: default/ImageLocality is both disabled and reweighted "
        "(the other change is at /p/a.policy:2:11)"
    ]


def test_a_policy_changes_each_extended_rule_once() -> None:
    """Two `override score` of one rule in one policy (weight 2, then 3) passed lint: the last one won."""
    text = """policy a extends default {
  disable default/ImageLocality, default/ImageLocality
  override score default/NodeAffinityScore { weight = 2 }
  override score default/NodeAffinityScore { normalize = max }
  override score default/NodeAffinityScore { weight = 3 }
}
"""
    assert _errors(a_policy=text) == [
        "/p/a.policy:2:34: error: disable default/ImageLocality: this policy already disables "
        "default/ImageLocality (at 2:11)",
        "/p/a.policy:5:18: error: override score default/NodeAffinityScore: this policy already sets the weight "
        "of default/NodeAffinityScore (at 3:18)",
    ]
    yaml_text = BINPACK_YAML.replace(
        "[default/ImageLocality]", "[default/ImageLocality, default/ImageLocality]"
    )
    assert _errors(binpack_yaml=yaml_text) == [
        "/p/binpack.yaml:10:36: error: disable default/ImageLocality: this policy already disables "
        "default/ImageLocality (at 10:13)"
    ]


@pytest.mark.parametrize(
    "text,message",
    [
        ("policy x extends default { disable default/Nope }", "policy 'default' has no rule 'Nope' (rules: "),
        (
            "policy x extends default { disable default/ImageLocalty }",
            "has no rule 'ImageLocalty' (did you mean 'ImageLocality'?) (rules: ",
        ),
        ("policy x extends default { disable other/F }", "no policy 'other' is loaded for profile 'policyd'"),
        (
            "policy x { disable default/NodePorts }",
            "policy 'x' does not extend 'default' (add `extends default`)",
        ),
        ("policy x extends nothing { }", "policy 'x' extends 'nothing', which is not loaded"),
        (
            "policy x extends default { override score default/NodePorts { weight = 2 } }",
            "it is a filter; only a score has a weight",
        ),
    ],
)
def test_overrides_must_name_what_the_policy_extends(text: str, message: str) -> None:
    errors = _errors(x_policy=text + "\n")
    assert len(errors) == 1 and errors[0].startswith("/p/x.policy:1:") and message in errors[0], errors


def test_extends_default_alone_builds_on_the_shipped_default() -> None:
    """With no policy `default` loaded, `extends default` is the shipped file, as a base only."""
    layer = 'policy x extends default {\n  profiles = ["packed"]\n  disable default/ImageLocality\n}\n'
    result = load_texts({"/p/x.policy": layer})
    assert [d.format() for d in result.diagnostics if d.severity == "error"] == []
    assert list(result.profiles) == ["packed"]  # the shipped default joins no profile of its own
    packed = result.profiles["packed"]
    assert packed.policies == ("default", "x")
    assert packed.layers[0].policy.file == str(shipped.default_policy())
    rules = {r.qualified: r for r in packed.rules}
    assert not rules["default/ImageLocality"].enabled and rules["default/NodeResourcesFit"].enabled
    assert [p.name.value for p in result.policies] == ["x"]  # what was loaded stays what was given
    compiled = compile_sources({"/p/x.policy": layer}, generation=1).profiles["packed"]
    assert compiled.policies == ("default", "x")


def test_a_default_of_another_file_takes_the_name() -> None:
    """A policy `default` that is not the shipped file is what `extends default` names: a profile
    whose sources lack it is told to list that file, and the shipped one is not looked up."""
    other = 'policy default {\n  profiles = ["other"]\n}\n'
    layer = 'policy x extends default {\n  profiles = ["packed"]\n}\n'
    texts = {"/p/default.policy": other, "/p/x.policy": layer}
    result = load_texts(
        texts, {"packed": frozenset({"/p/x.policy"}), "other": frozenset({"/p/default.policy"})}
    )
    found = [d.message for d in result.diagnostics if d.severity == "error"]
    assert len(found) == 1, found
    assert "policy 'x' extends 'default', which is not loaded for profile 'packed'" in found[0]
    assert "the policy 'default' of /p/default.policy takes the name" in found[0]
    assert str(shipped.default_policy()) not in found[0]
    # unscoped, the other file's `default` is the base
    assert load_texts(texts).profiles["packed"].layers[0].policy.file == "/p/default.policy"


def test_a_profile_without_the_loaded_shipped_default_still_builds_on_it() -> None:
    """The shipped file listed for one profile is the base of another profile that extends it."""
    path = str(shipped.default_policy())
    layer = 'policy x extends default {\n  profiles = ["packed"]\n}\n'
    texts = {path: DEFAULT, "/p/x.policy": layer}
    result = load_texts(texts, {"packed": frozenset({"/p/x.policy"}), "policyd": frozenset({path})})
    assert [d.format() for d in result.diagnostics if d.severity == "error"] == []
    assert result.profiles["packed"].policies == ("default", "x")
    assert result.profiles["packed"].layers[0] is result.profiles["policyd"].layers[0]


def test_without_the_shipped_default_at_hand_the_error_names_the_file_to_load() -> None:
    from policyd.policy.composition import compose

    layer = load_texts({"/p/x.policy": "policy x extends default { }\n"}).checked
    found = [d.message for d in compose(layer).diagnostics if d.severity == "error"]
    assert len(found) == 1, found
    assert f"the shipped default policy is {shipped.default_policy()}: load it too" in found[0]
    nothing = load_texts({"/p/x.policy": "policy x extends nothing { }\n"})
    assert "shipped" not in [d.message for d in nothing.diagnostics if d.severity == "error"][0]
    # the hint's name is the shipped policy's own
    assert [p.name.value for p in load_texts({BASE: DEFAULT}).policies] == [SHIPPED_DEFAULT]


def test_extends_cycle_is_an_error() -> None:
    errors = _errors(a_policy="policy a extends b { }\n", b_policy="policy b extends a { }\n")
    assert any("extends itself (a -> b -> a)" in e or "extends itself (b -> a -> b)" in e for e in errors)


def test_compile_refuses_a_conflicting_set() -> None:
    with pytest.raises(PolicyError, match="does not extend"):
        compile_sources(
            {BASE: DEFAULT, "/p/x.policy": "policy x { disable default/NodePorts }\n"}, generation=1
        )


def test_profile_without_resource_fit_is_warned_about() -> None:
    _, diagnostics = _load(
        t_policy='policy t {\n  profiles = ["other"]\n  filter F { expr = node.ready }\n}\n'
    )
    assert (
        "/p/t.policy:1:8: warning: profile 'other' has no filter reading node capacity "
        "(node.allocatable, node.free, node.requested): pods may be placed on full nodes "
        "(extend `default`, or add a resource-fit filter)"
    ) in diagnostics
    assert not any("profile 'policyd' has no filter" in d for d in diagnostics)
    # disabling the default resource fit loses it
    _, diagnostics = _load(x_policy="policy x extends default {\n  disable default/NodeResourcesFit\n}\n")
    assert any("profile 'policyd' has no filter reading node capacity" in d for d in diagnostics)


def test_scopes_limit_a_profile_to_its_own_files() -> None:
    other = 'policy extra {\n  profiles = ["policyd", "b"]\n  filter Never { expr = false }\n}\n'
    texts = {BASE: DEFAULT, "/q/extra.policy": other}
    both = load_texts(texts)
    assert both.profiles["policyd"].policies == ("default", "extra")
    scoped = load_texts(texts, {"policyd": frozenset({BASE}), "b": frozenset({"/q/extra.policy"})})
    assert scoped.profiles["policyd"].policies == ("default",)
    assert scoped.profiles["b"].policies == ("extra",)


def test_policy_names_are_unique_across_profiles_even_with_their_own_sources() -> None:
    """The documented rule (LANGUAGE.md, "Names"): a duplicate is an error across all loaded sources,
    not only within one profile's layers, and says so."""
    team = 'policy team {{\n  profiles = ["{}"]\n  filter F {{\n    expr = true\n  }}\n}}\n'
    texts = {"/a/team.policy": team.format("a"), "/b/team.policy": team.format("b")}
    scopes = {"a": frozenset({"/a/team.policy"}), "b": frozenset({"/b/team.policy"})}
    with pytest.raises(PolicyError) as caught:
        compile_sources(texts, generation=1, scopes=scopes)
    (error,) = caught.value.errors
    assert (error.span.file, error.span.line, error.span.column) == ("/b/team.policy", 1, 8)
    assert error.message == (
        "duplicate policy name 'team' (first defined at /a/team.policy:1:8); "
        "policy names are unique across all loaded sources, whichever profiles use them"
    )
    # each under its own name, the two profiles load side by side
    texts["/b/team.policy"] = team.format("b").replace("policy team", "policy team-b")
    assert set(compile_sources(texts, generation=1, scopes=scopes).profiles) == {"a", "b"}
