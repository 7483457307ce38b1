"""The optimistic read of whole files stands only where the line-exact reader would agree:
a file holding an id that is not lowercase hex of its length is read again line by line,
and gives the rows reading its lines one by one gives."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_load import export, span_json

from auditor import append_lines, connect, load_traces
from auditor.fast_path import files_with_invalid_ids
from auditor.load import TraceSet
from auditor.readers import Reader

GOOD_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


def _lines(bad_id: dict[str, str] | None) -> list[str]:
    lines = [export(span_json(f"{i:016x}", attrs={"handoff.receiver": "b"})) for i in range(1, 6)]
    if bad_id is not None:
        fields: dict[str, Any] = {"span_id": "00000000000000aa", **bad_id}
        lines.insert(2, export(span_json(**fields)))
    return lines


def _rows(ts: TraceSet) -> list[tuple[object, ...]]:
    return ts.con.execute(
        'SELECT trace_id, span_id, parent_span_id, name, "handoff.receiver", source_line'
        " FROM spans ORDER BY source_line, span_id"
    ).fetchall()


@pytest.mark.parametrize(
    "bad_id",
    [
        {"trace_id": "not-a-hex-trace-id"},
        {"trace_id": GOOD_TRACE[:-2]},  # one byte short
        {"span_id": "zz00000000000000"},
        {"parentSpanId": "0123"},
    ],
    ids=["words", "short-trace", "non-hex-span", "short-parent"],
)
def test_a_file_with_an_invalid_id_is_read_line_by_line_with_the_same_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bad_id: dict[str, str]
) -> None:
    path = tmp_path / "traces.jsonl"
    lines = _lines(bad_id)
    path.write_text("\n".join(lines) + "\n")
    exact: list[str] = []
    original = Reader._read_lines_in_python

    def spy(self: Reader, source: object) -> None:
        exact.append(source.path)  # type: ignore[attr-defined]
        original(self, source)  # type: ignore[arg-type]

    monkeypatch.setattr(Reader, "_read_lines_in_python", spy)
    loaded = load_traces(path)
    assert exact == [str(path)]
    by_lines = TraceSet(con=connect())
    append_lines(by_lines, enumerate(lines, start=1), file=str(path), final=True)
    assert _rows(loaded) == _rows(by_lines)
    assert len(_rows(loaded)) == 6
    assert [str(p) for p in loaded.problems] == [str(p) for p in by_lines.problems]


def test_a_file_of_valid_ids_stays_on_the_fast_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "traces.jsonl"
    # Uppercase and base64 ids are converted to lowercase hex, so they are valid ids.
    lines = _lines({"trace_id": GOOD_TRACE.upper()})
    path.write_text("\n".join(lines) + "\n")
    monkeypatch.setattr(
        Reader, "_read_lines_in_python", lambda *_: pytest.fail("read line by line")
    )
    loaded = load_traces(path)
    assert loaded.span_count == 6 and not loaded.problems
    assert files_with_invalid_ids(loaded.con, [str(path)]) == set()


def test_invalid_ids_are_found_per_file_and_missing_ids_are_not_invalid() -> None:
    con = connect()
    con.execute(
        "INSERT INTO spans (trace_id, span_id, parent_span_id, source_file) VALUES"
        f" ('{GOOD_TRACE}', '00f067aa0ba902b7', NULL, 'a'),"
        " (NULL, NULL, NULL, 'b'),"
        f" ('{GOOD_TRACE}', '00F067AA0BA902B7', NULL, 'c'),"
        f" ('{GOOD_TRACE}', '00f067aa0ba902b7', 'x', 'd')"
    )
    assert files_with_invalid_ids(con, ["a", "b", "c", "d"]) == {"c", "d"}
    assert files_with_invalid_ids(con, ["a", "b"]) == set()
