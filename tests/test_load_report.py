"""What loading reports to its caller: the LoadStage records it hands out, the LoadError it raises,
the report of a caller that does not watch, and how sizes read in its lines (size_text)."""

from __future__ import annotations

import dataclasses

import pytest

import ouroboros_core
from ouroboros_core.load_report import LoadError, LoadStage, ignore, size_text

KIB, MIB, GIB = 2**10, 2**20, 2**30


def test_sizes_under_a_mebibyte_read_in_whole_kibibytes():
    assert size_text(0) == "0 KiB"
    assert size_text(KIB) == "1 KiB"
    assert size_text(700 * KIB) == "700 KiB"
    assert size_text(1023) == "1 KiB"  # rounded, not cut
    assert size_text(MIB - 1) == "1 MiB"  # rounds up to the next unit, never "1024 KiB"
    assert size_text(MIB - 513) == "1023 KiB"


def test_sizes_from_a_mebibyte_read_in_whole_mebibytes():
    assert size_text(MIB) == "1 MiB"
    assert size_text(515 * MIB + 300 * KIB) == "515 MiB"
    assert size_text(515 * MIB + 700 * KIB) == "516 MiB"
    assert size_text(GIB - 1) == "1.0 GiB"
    assert size_text(GIB - MIB) == "1023 MiB"


def test_sizes_from_a_gibibyte_read_in_gibibytes_with_one_decimal():
    assert size_text(GIB) == "1.0 GiB"
    assert size_text(15 * GIB // 2) == "7.5 GiB"
    assert size_text(80 * GIB - 1) == "80.0 GiB"
    assert size_text(1000 * GIB) == "1000.0 GiB"  # no larger unit


def test_a_load_stage_is_a_fixed_record_whose_counts_default_to_unknown():
    stage = LoadStage("load", "Loading the target onto cpu in float32")
    assert (stage.stage, stage.text, stage.done, stage.total) == (
        "load",
        "Loading the target onto cpu in float32",
        None,
        None,
    )
    counted = LoadStage("download", "Downloading someone/target: 1 of 4 files", 1, 4)
    assert (counted.done, counted.total) == (1, 4)
    # equal by value, so a page can tell a repeated stage from a new one
    assert counted == LoadStage("download", "Downloading someone/target: 1 of 4 files", 1, 4)
    assert counted != LoadStage("download", "Downloading someone/target: 1 of 4 files", 2, 4)
    with pytest.raises(dataclasses.FrozenInstanceError):
        counted.done = 2


def test_the_report_of_a_caller_that_does_not_watch_takes_any_stage_and_does_nothing():
    stage = LoadStage("download", "Downloading", 0, 3)
    assert ignore(stage) is None
    assert stage == LoadStage("download", "Downloading", 0, 3)


def test_a_load_error_is_a_runtime_error_that_carries_its_advice_and_is_the_packages_own():
    error = LoadError("model folder 'x' does not exist, and it is not a Hub id (owner/name)")
    assert isinstance(error, RuntimeError)
    assert str(error) == "model folder 'x' does not exist, and it is not a Hub id (owner/name)"
    assert ouroboros_core.LoadError is LoadError  # what callers catch is what loading raises
    with pytest.raises(RuntimeError, match="not a Hub id"):
        raise error
