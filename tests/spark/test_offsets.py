"""Offset resolution, rate-limit splitting and offset-by-time search, without Spark."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spark import offsets as off
from spark.offsets import EARLIEST, LATEST, Bounds, OffsetError, Range

QUEUES = ["a", "b"]
LAYOUT = {"a": {0: Bounds(5, 20), 1: Bounds(0, 0)}, "b": {0: Bounds(0, 7)}}


def test_named_specs_resolve_to_each_partitions_bounds() -> None:
    earliest = off.parse_spec("earliest", "startingOffsets", LATEST, QUEUES)
    latest = off.parse_spec(" LATEST ", "startingOffsets", EARLIEST, QUEUES)
    assert off.resolve(earliest, LAYOUT, "x") == {"a": {"0": 5, "1": 0}, "b": {"0": 0}}
    assert off.resolve(latest, LAYOUT, "x") == {"a": {"0": 20, "1": 0}, "b": {"0": 7}}


def test_json_spec_mixes_explicit_offsets_and_sentinels_and_defaults_the_rest() -> None:
    spec = off.parse_spec('{"a": {"0": 9, "1": -1}}', "startingOffsets", EARLIEST, QUEUES)
    assert off.resolve(spec, LAYOUT, "startingOffsets") == {"a": {"0": 9, "1": 0}, "b": {"0": 0}}


def test_empty_spec_takes_the_default() -> None:
    assert off.parse_spec(None, "x", LATEST, QUEUES) == off.OffsetSpec(LATEST, {})


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", "not 'earliest', 'latest' or JSON"),
        ('["a"]', "JSON must look like"),
        ('{"zzz": {"0": 1}}', "not subscribed"),
        ('{"a": {"x": 1}}', "partition 'x'"),
        ('{"a": {"0": -3}}', "offset -3"),
        ('{"a": {"0": true}}', "offset True"),
        ('{"a": {"0": "5"}}', "offset '5'"),
    ],
)
def test_malformed_specs_name_the_option_and_the_problem(text: str, message: str) -> None:
    with pytest.raises(OffsetError, match="startingOffsets") as info:
        off.parse_spec(text, "startingOffsets", EARLIEST, QUEUES)
    assert message in str(info.value)


def test_a_spec_naming_a_missing_partition_is_refused() -> None:
    spec = off.parse_spec('{"b": {"3": 1}}', "endingOffsets", LATEST, QUEUES)
    with pytest.raises(OffsetError, match=r"'b' has 1 partitions, no partition \[3\]"):
        off.resolve(spec, LAYOUT, "endingOffsets")


def test_offsets_below_retention_fail_or_skip_to_earliest() -> None:
    start = {"a": {"0": 2, "1": 0}, "b": {"0": 7}}
    with pytest.raises(OffsetError, match=r"a/0 offset 2 is deleted .*\[5, 20\)"):
        off.check_retained(start, LAYOUT, fail_on_data_loss=True)
    kept = off.check_retained(start, LAYOUT, fail_on_data_loss=False)
    assert kept == {"a": {"0": 5, "1": 0}, "b": {"0": 7}}


def test_offsets_beyond_the_end_mean_a_recreated_queue() -> None:
    with pytest.raises(OffsetError, match="beyond the end"):
        off.check_retained({"b": {"0": 99}}, LAYOUT, fail_on_data_loss=True)


def test_new_partitions_start_at_their_earliest_and_known_ones_stay() -> None:
    start = {"a": {"0": 11}}
    grown = {"a": {0: Bounds(5, 20), 1: Bounds(3, 9)}, "b": {0: Bounds(0, 7)}}
    assert off.with_new_partitions(start, grown) == {"a": {"0": 11, "1": 3}, "b": {"0": 0}}


def test_ranges_skip_empty_partitions_and_refuse_an_end_before_the_start() -> None:
    start = {"a": {"0": 5, "1": 0}, "b": {"0": 0}}
    end = {"a": {"0": 20, "1": 0}, "b": {"0": 7}}
    assert off.ranges(start, end) == [Range("a", 0, 5, 20), Range("b", 0, 0, 7)]
    with pytest.raises(OffsetError, match="a/0 ends at 4 before 5"):
        off.ranges(start, {"a": {"0": 4}})


def test_min_partitions_splits_in_proportion_to_size_and_covers_every_offset() -> None:
    parts = off.split_ranges([Range("a", 0, 0, 90), Range("a", 1, 0, 10)], 10)
    assert [(r.partition, r.start, r.end) for r in parts if r.partition == 1] == [(1, 0, 10)]
    assert len([r for r in parts if r.partition == 0]) == 9
    assert off.total(parts) == 100
    assert off.split_ranges([Range("a", 0, 0, 5)], 1) == [Range("a", 0, 0, 5)]


@given(
    sizes=st.lists(st.integers(0, 500), min_size=1, max_size=6),
    want=st.integers(1, 40),
)
def test_split_ranges_is_an_exact_ordered_cover(sizes: list[int], want: int) -> None:
    items = [Range("q", p, 10, 10 + n) for p, n in enumerate(sizes) if n]
    parts = off.split_ranges(items, want)
    for item in items:
        mine = [r for r in parts if r.partition == item.partition]
        assert mine[0].start == item.start and mine[-1].end == item.end
        assert all(a.end == b.start for a, b in zip(mine, mine[1:], strict=False))


def test_rate_limit_splits_the_budget_in_proportion_to_backlog() -> None:
    start = {"q": {"0": 0, "1": 0, "2": 0}}
    latest = {"q": {"0": 10, "1": 10, "2": 10}}
    first = off.rate_limit(start, latest, 12)
    assert first == {"q": {"0": 4, "1": 4, "2": 4}}
    second = off.rate_limit(first, latest, 12)
    assert second == {"q": {"0": 8, "1": 8, "2": 8}}
    assert off.rate_limit(second, latest, 12) == latest


def test_rate_limit_gives_rounding_leftovers_to_the_largest_remainders() -> None:
    start = {"q": {"0": 0, "1": 0}, "r": {"0": 100}}
    latest = {"q": {"0": 1, "1": 50}, "r": {"0": 149}}
    end = off.rate_limit(start, latest, 10)
    assert end == {"q": {"0": 0, "1": 5}, "r": {"0": 105}}


def test_rate_limit_reads_new_partitions_from_zero_and_refuses_a_zero_budget() -> None:
    assert off.rate_limit({}, {"q": {"0": 3}}, 2) == {"q": {"0": 2}}
    with pytest.raises(OffsetError):
        off.rate_limit({}, {"q": {"0": 3}}, 0)


@given(
    backlog=st.lists(st.tuples(st.integers(0, 1000), st.integers(0, 1000)), min_size=1, max_size=8),
    limit=st.integers(1, 3000),
)
def test_rate_limit_admits_exactly_min_of_limit_and_backlog(
    backlog: list[tuple[int, int]], limit: int
) -> None:
    start = {"q": {str(i): s for i, (s, _) in enumerate(backlog)}}
    latest = {"q": {str(i): s + n for i, (s, n) in enumerate(backlog)}}
    end = off.rate_limit(start, latest, limit)
    admitted = [end["q"][p] - start["q"][p] for p in start["q"]]
    assert all(0 <= a <= n for a, (_, n) in zip(admitted, backlog, strict=True))
    assert sum(admitted) == min(limit, sum(n for _, n in backlog))


def test_cap_holds_an_available_now_run_to_its_target() -> None:
    end = {"q": {"0": 50, "1": 9}}
    assert off.cap(end, {"q": {"0": 40}}) == {"q": {"0": 40, "1": 9}}
    assert off.cap(end, None) == end


def test_a_time_offset_is_the_servers_answer_kept_within_the_plan() -> None:
    bounds = Bounds(3, 1000)
    assert off.offset_for_time(bounds, 50) == 50
    assert off.offset_for_time(bounds, None) == 1000  # nothing at or after: the end
    assert off.offset_for_time(bounds, 1200) == 1000  # appended after the layout
    assert off.offset_for_time(bounds, 0) == 3


def test_timestamps_are_epoch_milliseconds() -> None:
    assert off.parse_timestamp(" 1700000000000 ", "startingTimestamp") == 1700000000000
    assert off.parse_timestamp(None, "startingTimestamp") is None
    with pytest.raises(OffsetError, match="startingTimestamp"):
        off.parse_timestamp("yesterday", "startingTimestamp")
