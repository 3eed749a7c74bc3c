"""Dataclass values to Spark rows and back, generated from the dataclass fields and the row
schema (``compactor.schemas.spark``) instead of written out per type: a column takes the attribute
of the same name (a property works too: derived columns such as ``dirty_ratio``), converted by the
column's type; reading back fills the fields the row has, converted by their annotations.

Conversions: tuples <-> arrays (nested), ``IntEnum`` <-> integer columns, mappings (and ``dict |
None`` fields) <-> JSON strings, numpy scalars from pandas to Python numbers.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from collections.abc import Mapping
from enum import Enum
from typing import Any, TypeVar

from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DataType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructType,
)

T = TypeVar("T")


def to_row(obj: object, schema: StructType, **extra: Any) -> dict[str, Any]:
    """The row of ``schema`` for ``obj``: each column from ``extra`` when named there, else
    from ``obj``'s attribute of the same name.

    Raises:
        AttributeError: a column that is neither in ``extra`` nor an attribute of ``obj``.
    """
    return {f.name: _to_spark(extra[f.name] if f.name in extra else getattr(obj, f.name),
                              f.dataType) for f in schema.fields}


def _to_spark(value: Any, dtype: DataType) -> Any:
    if value is None:
        return None
    if isinstance(dtype, ArrayType):
        return [_to_spark(v, dtype.elementType) for v in value]
    if isinstance(dtype, StringType) and isinstance(value, Mapping):
        return json.dumps(dict(value))
    if isinstance(dtype, (IntegerType, LongType)):
        return int(value)
    if isinstance(dtype, BooleanType):
        return bool(value)
    if isinstance(dtype, DoubleType):
        return float(value)
    return value


def from_row(cls: type[T], row: Mapping[str, Any]) -> T:
    """An instance of the dataclass ``cls`` from a row (``Row.asDict()`` or a mapping): the
    fields the row holds, converted by their annotations; the others keep their defaults."""
    hints = typing.get_type_hints(cls)
    kwargs = {f.name: _from_spark(row[f.name], hints[f.name])
              for f in dataclasses.fields(cls)  # type: ignore[arg-type]
              if f.name in row}
    return cls(**kwargs)


def _from_spark(value: Any, hint: Any) -> Any:
    if value is None:
        return None
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        (inner,) = [a for a in args if a is not type(None)]
        return _from_spark(value, inner)
    if origin is tuple:
        return tuple(_from_spark(v, args[0]) for v in value)
    if hint is dict or origin in (dict, Mapping):
        return json.loads(value) if isinstance(value, str) else dict(value)
    if isinstance(hint, type) and issubclass(hint, Enum):
        return hint(value)
    if hint in (int, float, bool, str):
        return hint(value)
    return value
