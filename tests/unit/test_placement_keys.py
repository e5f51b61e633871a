"""The one placement rule (core/placement_keys.py): key ranges, splits, gates.

Splits must never move a key placed before them: a key on partition p goes,
after p splits, to exactly one of p's children, and a queue never split
places exactly as before (``h % n``).
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raft_queue.core.placement_keys import (
    KeyRange,
    Layout,
    apply_splits,
    key_hash,
    partition_for_key,
    plan_splits,
    splits_for,
)

KEYS = [f"key-{i}" for i in range(3000)]


def test_an_unsplit_layout_places_exactly_as_the_modulus_rule() -> None:
    for n in (1, 3, 7, 16):
        layout = Layout.initial(n)
        assert not layout.split
        assert [partition_for_key(k, layout) for k in KEYS] == [key_hash(k) % n for k in KEYS]
        assert [partition_for_key(k, n) for k in KEYS] == [key_hash(k) % n for k in KEYS]


def test_a_split_sends_each_key_of_the_parent_to_one_child_and_moves_no_other() -> None:
    before = Layout.initial(3)
    after = before.with_split(1)
    # Splitting: the parent still takes its whole range while the children elect.
    assert after.ranges[1].state == "splitting" and after.writable() == (0, 1, 2, 3, 4)
    assert {partition_for_key(k, after) for k in KEYS} == {0, 1, 2}
    after = after.with_state(1, "sealed")
    assert after.version == 5 and after.writable() == (0, 2, 3, 4)
    assert after.ranges[3] == KeyRange(3, 6, 1, parent=1)
    assert after.ranges[4] == KeyRange(4, 6, 4, parent=1)
    for k in KEYS:
        old, new = partition_for_key(k, before), partition_for_key(k, after)
        if old == 1:
            assert new in (3, 4)
        else:
            assert new == old
    assert {partition_for_key(k, after) for k in KEYS if partition_for_key(k, before) == 1} == {
        3,
        4,
    }


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 6), st.integers(0, 12), st.lists(st.text(max_size=8), max_size=40))
def test_every_key_lands_on_an_open_partition_that_descends_from_its_old_one(
    roots: int, splits: int, keys: list[str]
) -> None:
    layout = Layout.initial(roots)
    grown = apply_splits(layout, plan_splits(layout, splits))
    for r in grown.ranges:
        if r.state == "splitting":
            grown = grown.with_state(r.partition, "sealed")
    assert grown.version == roots + 2 * splits
    assert len(grown.writable()) == roots + splits
    for k in keys:
        part = partition_for_key(k, grown)
        assert grown.is_open(part) and grown.ranges[part].owns(key_hash(k))
        ancestor = part
        while grown.ranges[ancestor].parent >= 0:
            ancestor = grown.ranges[ancestor].parent
        assert ancestor == partition_for_key(k, roots)


def test_splits_take_the_largest_range_first() -> None:
    assert plan_splits(Layout.initial(2), 4) == [0, 1, 2, 3]
    assert plan_splits(Layout.initial(1), 3) == [0, 1, 2]


def test_children_are_gated_until_every_ancestor_is_drained() -> None:
    layout = Layout.initial(2).with_split(0)  # 0 -> 2, 3
    assert layout.gated() == {2, 3}
    layout = layout.with_state(0, "sealed").with_split(2)  # 2 -> 4, 5
    assert layout.gated() == {2, 3, 4, 5}
    layout = layout.with_state(2, "sealed").with_state(2, "drained")  # 0 still holds keys
    assert layout.gated() == {2, 3, 4, 5}
    layout = layout.with_state(0, "drained")
    assert layout.gated() == set()


def test_a_partition_only_moves_forward_through_its_states() -> None:
    layout = Layout.initial(1).with_split(0)
    with pytest.raises(ValueError, match="cannot become drained"):
        layout.with_state(0, "drained")  # not sealed yet
    sealed = layout.with_state(0, "sealed")
    assert sealed.with_state(0, "sealed") == sealed
    with pytest.raises(ValueError, match="cannot become open"):
        sealed.with_state(0, "open")
    with pytest.raises(ValueError, match="cannot become sealed"):
        layout.with_state(1, "sealed")  # a child, open


def test_growth_is_by_two_per_split_and_never_shrinks() -> None:
    assert splits_for(4, 4) == 0
    assert splits_for(4, 8) == 2
    with pytest.raises(ValueError, match="grows to 6, 8"):
        splits_for(4, 5)
    with pytest.raises(ValueError, match="merging is not supported"):
        splits_for(4, 2)


def test_only_an_open_partition_splits() -> None:
    layout = Layout.initial(1).with_split(0)
    with pytest.raises(ValueError, match="splitting"):
        layout.with_split(0)
    with pytest.raises(ValueError, match="0..n-1"):
        Layout([KeyRange(1, 1, 0)])
