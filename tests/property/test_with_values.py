"""A rewrite's new values in a column (``compactor.state.tables.with_values``), against brute
force: every row as the rule sets it, and a dictionary column still one Parquet's writer
writes by dictionary (no entry twice: it falls back to a value a row at the first)."""

from __future__ import annotations

import io

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import given
from hypothesis import strategies as st

from compactor.state import tables as state_tables

_VALUES = st.sampled_from([None, "", "applied", "verified", '{"b1:/d": {"applied_run_id": "r"}}'])


@given(st.lists(_VALUES, min_size=1, max_size=30), st.lists(_VALUES, min_size=1, max_size=5),
       st.data(), st.booleans())
def test_new_values_land_on_their_rows_and_a_dictionary_holds_each_once(
        rows: list[str | None], values: list[str | None], data: st.DataObject,
        as_dictionary: bool) -> None:
    which = np.array(data.draw(st.lists(st.integers(-1, len(values) - 1), min_size=len(rows),
                                        max_size=len(rows))), dtype=np.int64)
    column = pa.array(rows, pa.string())
    if as_dictionary:
        column = column.dictionary_encode()
    out = state_tables.with_values(column, values, which)
    assert out.to_pylist() == [values[w] if w >= 0 else r for r, w in zip(rows, which)]
    if as_dictionary and not (which < 0).all():
        entries = out.dictionary.to_pylist()
        assert len(entries) == len(set(entries))
        sink = io.BytesIO()
        pq.write_table(pa.table({"c": out}), sink)
        chunk = pq.ParquetFile(io.BytesIO(sink.getvalue())).metadata.row_group(0).column(0)
        assert "RLE_DICTIONARY" in chunk.encodings
