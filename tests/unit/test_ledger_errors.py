"""What the ledger's errors tell an operator to do: a damaged table is restored, but a table
the installation's Arrow cannot read (a missing compute kernel, as delta-rs's ``string_view``
files once caused) must not be: restoring it would throw away a healthy ledger."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from compactor.errors import LedgerError
from compactor.state import tables as state_tables


def _mapped(fail: object) -> LedgerError:
    with pytest.raises(LedgerError) as caught:
        with state_tables.mapped_errors("read the erasure request ledger", "/var/lib/state"):
            fail()  # type: ignore[operator]
    return caught.value


def test_an_arrow_function_missing_for_the_files_types_is_not_called_damage() -> None:
    def compare_views() -> None:  # Arrow's own error, as the reads met it
        pc.greater_equal(pa.array(["a"], pa.string()), pa.array(["a"], pa.string_view()))

    try:
        compare_views()
    except pa.ArrowNotImplementedError:
        err = _mapped(compare_views)
    else:  # a pyarrow with the kernel: raise the same error type Arrow raised before
        err = _mapped(lambda: (_ for _ in ()).throw(pa.ArrowNotImplementedError(
            "Function 'greater_equal' has no kernel matching input types")))
    assert err.remedy == state_tables.UNREADABLE_REMEDY and "do not restore" in err.remedy
    assert "/var/lib/state" in str(err)


def test_a_file_arrow_cannot_parse_is_damage() -> None:
    err = _mapped(lambda: (_ for _ in ()).throw(pa.ArrowInvalid("Parquet magic bytes not found")))
    assert err.remedy == state_tables.DAMAGED_REMEDY
