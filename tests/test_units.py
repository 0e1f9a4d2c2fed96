import pytest
from hypothesis import given
from hypothesis import strategies as st

from storeval.units import UnitError, format_size, format_size_compact, parse_duration, parse_rate, parse_size


@pytest.mark.parametrize("text,expected", [
    ("4k", 4096), ("4K", 4096), ("4KiB", 4096), ("4kib", 4096), ("4KB", 4000), ("4kB", 4000),
    ("1.5GiB", 1610612736), ("32MB", 32_000_000), ("32MiB", 33554432), ("1M", 1 << 20), ("512", 512),
    ("512B", 512), (" 64 MiB ", 64 << 20), ("1TiB", 1 << 40), ("2TB", 2 * 10**12), (0, 0), (4096, 4096),
])
def test_sizes(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("text,message", [
    ("1Mx", "is not a size (try 1MiB)"), ("abc", "is not a size"), ("1.3k", "not a whole number of bytes"),
    (-1, "negative"), (True, "is not a size"), ("", "is not a size"), ("1..5MiB", "is not a size"),
])
def test_bad_sizes(text, message):
    with pytest.raises(UnitError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_size(text)


def test_rates_bits_and_bytes():
    assert parse_rate("10Gbit") == 10e9 / 8
    assert parse_rate("10Gbit/s") == 10e9 / 8
    assert parse_rate("3GB/s") == 3e9
    assert parse_rate("800MiB/s") == 800 * 2**20
    with pytest.raises(UnitError):
        parse_rate("fast")


def test_durations():
    assert parse_duration("30s") == 30
    assert parse_duration("100ms") == pytest.approx(0.1)
    assert parse_duration("5m") == 300
    assert parse_duration(2) == 2
    with pytest.raises(UnitError):
        parse_duration("soon")


@given(st.integers(min_value=0, max_value=2**50))
def test_compact_size_roundtrip(n):
    assert parse_size(format_size_compact(n)) == n


def test_format_size():
    assert format_size(64 << 20) == "64 MiB"
    assert format_size(1536) == "1.5 KiB"
