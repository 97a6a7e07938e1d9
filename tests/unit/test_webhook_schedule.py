"""Webhook retry decisions without I/O: ``next_delay`` over the schedule, jitter and ``Retry-After``."""

from __future__ import annotations

import random
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from worker.settings import DEFAULT_RETRY_SCHEDULE
from worker.webhooks.deliver import next_delay, retry_after_seconds

delays = st.floats(min_value=0, max_value=10**6, allow_nan=False)
schedules = st.lists(delays, max_size=12).map(tuple)


@given(schedules, st.integers(min_value=0, max_value=20), st.none() | delays, st.integers())
def test_delay_is_the_scheduled_one_within_20_percent_or_retry_after(
    schedule: tuple[float, ...], attempt: int, retry_after: float | None, seed: int
) -> None:
    """Within the schedule: the entry times a jitter in [0.8, 1.2], never below Retry-After (clamped to the
    schedule's longest delay); past it: None."""
    delay = next_delay(schedule, attempt, retry_after, random.Random(seed))
    if attempt >= len(schedule):
        assert delay is None
        return
    assert delay is not None
    floor = min(retry_after or 0.0, max(schedule))
    assert delay >= floor
    assert delay <= max(schedule) * 1.2
    if delay > floor:  # the jittered schedule decided
        assert schedule[attempt] * 0.8 <= delay <= schedule[attempt] * 1.2


@given(schedules.filter(bool), st.integers())
def test_same_seed_same_delays(schedule: tuple[float, ...], seed: int) -> None:
    """The jitter comes only from the random source handed in: one seed, one sequence of delays."""
    one, two = random.Random(seed), random.Random(seed)
    first = [next_delay(schedule, n, None, one) for n in range(len(schedule))]
    second = [next_delay(schedule, n, None, two) for n in range(len(schedule))]
    assert first == second


def test_jitter_spreads_over_the_whole_band() -> None:
    """Over many draws the jitter reaches both ends of ±20 %, so retries of many jobs do not align."""
    rng = random.Random(1)
    drawn = [next_delay((100.0,), 0, None, rng) for _ in range(2000)]
    assert all(d is not None and 80.0 <= d <= 120.0 for d in drawn)
    assert min(d for d in drawn if d is not None) < 81 and max(d for d in drawn if d is not None) > 119


def test_retry_after_longer_than_the_scheduled_delay_wins_exactly() -> None:
    """A Retry-After beyond the jittered delay is the delay, unjittered."""
    assert next_delay((5.0, 7200.0), 0, 3600.0, random.Random(0)) == 3600.0


def test_retry_after_is_clamped_to_the_schedules_longest_delay() -> None:
    """A receiver cannot park a webhook beyond the schedule: Retry-After counts up to the longest delay."""
    assert next_delay((5.0, 60.0), 0, 10.0**9, random.Random(0)) == 60.0
    assert next_delay((5.0, 60.0), 1, float(10**9), random.Random(0)) == pytest.approx(60.0, rel=0.2)


@pytest.mark.parametrize(
    ("header", "seconds"),
    [
        ("120", 120.0),
        (" 7 ", 7.0),
        ("0", 0.0),
        ("9" * 400, 10.0**9),  # finite, then clamped by next_delay
        ("-5", None),
        ("1e400", None),
        ("inf", None),
        ("nan", None),
        ("3.5", None),
        ("Wed, 02 Jan 2030 03:06:05 GMT", 120.0),
        ("Wed, 02 Jan 2030 03:06:05 -0000", 120.0),  # no zone said: UTC
        ("Tue, 01 Jan 2030 03:04:05 GMT", 0.0),  # in the past
        ("Wed, 02 Jan 99999 03:06:05 GMT", None),
        ("", None),
        (None, None),
    ],
)
def test_retry_after_is_parsed_strictly(header: str | None, seconds: float | None) -> None:
    """Seconds as digits or an HTTP date, counted from the clock; anything else is no Retry-After."""
    now = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert retry_after_seconds(header, now) == seconds


def test_zero_delay_stays_zero() -> None:
    """A 0 in the schedule (the first attempt by default) is sent at once, jitter or not."""
    assert next_delay(DEFAULT_RETRY_SCHEDULE, 0, None, random.Random(0)) == 0.0


def test_default_schedule_has_eight_attempts() -> None:
    """The default schedule allows eight attempts; the ninth is refused (None)."""
    rng = random.Random(0)
    refused = [next_delay(DEFAULT_RETRY_SCHEDULE, n, None, rng) is None for n in range(9)]
    assert refused == [False] * 8 + [True]
