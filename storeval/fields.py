"""Pydantic field types shared by study parameters and driver options: sizes, durations, rates."""

from __future__ import annotations

from typing import Annotated

from pydantic import BeforeValidator

from .units import UnitError, parse_duration, parse_rate, parse_size


MAX_SIZE = 1 << 60  # 1 EiB: far beyond any file or buffer, and sums of a million of them still fit 64-bit offsets


def _size(value: object) -> int:
    try:
        size = parse_size(value)
    except UnitError as e:
        raise ValueError(str(e)) from None
    if size > MAX_SIZE:
        raise ValueError("is more than 1 EiB, the largest size storeval takes (lower it)")
    return size


def _duration(value: object) -> float:
    try:
        return parse_duration(value)
    except UnitError as e:
        raise ValueError(str(e)) from None


def _rate(value: object) -> float:
    try:
        return parse_rate(value)
    except UnitError as e:
        raise ValueError(str(e)) from None


Size = Annotated[int, BeforeValidator(_size)]  # bytes, from 4k, 4KiB, 1.5GiB, 32MB
Duration = Annotated[float, BeforeValidator(_duration)]  # seconds, from 30s, 100ms, 5m
Rate = Annotated[float, BeforeValidator(_rate)]  # bytes per second, from 10Gbit, 3GB/s


def is_size_validator(validator: object) -> bool:
    return getattr(validator, "func", None) is _size
