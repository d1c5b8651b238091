"""Mutation-test survivors of state.json and the run-id allocator
(`harness.supervisor.state`) and of the boot's settling of the run ids it names
(`harness.supervisor.history.settle_firings`): the last id a counter can hold, the error
that names a counter no id can be read from, and every malformed ``held``/``issued``
shape a hand edit or a half upgrade can leave, which the boot names in one log line and
never answers with a traceback. Real state files and ledgers in tmp dirs; the boot itself
is a real daemon."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness.supervisor.state import MAX_RUN_ID, RunIds, StateError, StateFile


def write_json(path: Path, doc: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))


# -- the allocator -------------------------------------------------------------------


def test_the_last_id_a_counter_can_hold_is_handed_out_and_then_none(tmp_path: Path) -> None:
    """The highest id handed out is the highest a counter may hold (2**63 - 2), so the
    next boot reads the counter it wrote; the id after it is refused, said as such, and
    state.json keeps that counter. Handing out 2**63 - 1 persisted a counter every later
    boot refused ("must be an integer from 0 to ..."): no daemon could start again."""
    p = tmp_path / "state.json"
    write_json(p, {"runs": {"a": {"last_run_id": MAX_RUN_ID - 2}}})
    ids = RunIds(StateFile(str(p)), None, str(tmp_path / "jobs"))
    assert ids.next("a") == MAX_RUN_ID - 1
    with pytest.raises(StateError) as ei:
        ids.next("a")
    assert str(ei.value) == ("a: no run id is left after 9223372036854775806, the highest "
                             "in use (state.json, the ledger or its run logs)")
    reread = StateFile(str(p))
    assert reread.load() == {"runs": {"a": {"last_run_id": MAX_RUN_ID - 1}}}
    assert reread.last_run_id("a") == MAX_RUN_ID - 1


@pytest.mark.parametrize(("value", "shown"), [
    ({"n": 7}, "an object"), ([7], "a list"), ("7" * 60, '"' + "7" * 38 + "…"),
])
def test_a_counter_that_is_no_id_is_quoted_by_its_kind_or_cut(
        tmp_path: Path, value: Any, shown: str) -> None:
    """The error quotes what the file holds: a container by its kind, never its contents
    (a counter hand-edited into an object may hold anything), a long scalar cut at 40."""
    p = tmp_path / "state.json"
    write_json(p, {"runs": {"n": {"last_run_id": value}}})
    with pytest.raises(StateError) as ei:
        StateFile(str(p)).load()
    assert str(ei.value) == (f"{p}: runs.n.last_run_id must be an integer from 0 to "
                             f"9223372036854775806, not {shown}")
