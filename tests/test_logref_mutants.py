"""Mutation-test survivors of the log a record names (`harness.ledger.logref`): a record
whose fields a hand-edited or damaged ledger left with the wrong type."""

from __future__ import annotations

from typing import Any

import pytest

from harness.ledger.logref import log_file

HERE = "/new/home/harness"
OLD = "/old/harness/jobs/j/7.log"


@pytest.mark.parametrize("stored", ["", 5, None, ["/old/harness/jobs/j/7.log"]])
def test_a_log_field_that_is_no_path_names_no_file(stored: Any) -> None:
    rec = {"harness": "j", "run_id": 7, "kind": "oneshot", "log": stored}
    assert log_file(rec, HERE) is None
    assert log_file(rec, None) is None


@pytest.mark.parametrize("rec", [
    {"harness": "j", "run_id": "7", "kind": "oneshot", "log": OLD},
    {"harness": "j", "kind": "oneshot", "log": OLD},
    {"harness": 7, "run_id": 7, "kind": "oneshot", "log": OLD},
])
def test_without_its_harness_and_run_id_a_record_s_log_is_the_path_as_written(
        rec: dict[str, Any]) -> None:
    """The layout cannot be spelled without the record's name and id (a string "7" is
    no run id): the field is the path written, not its place under this state dir."""
    assert log_file(rec, HERE) == OLD
