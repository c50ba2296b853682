"""Writing and reading result tables as CSV or Parquet, with the same columns and dtypes either way.

CSV is the default and stays byte-for-byte what laya-eval has always written
(``to_csv(index=False, float_format="%.8g", lineterminator="\\n")``). Parquet (the optional
``parquet`` extra: pyarrow) suits tables of millions of rows (``layers``, ``samples``); its
bytes are deterministic too: no index, no timestamps, fixed compression and row groups.

Examples
--------
>>> path = write_table(frame, "out/layers", "parquet")   # doctest: +SKIP
>>> read_table("out/layers")                             # doctest: +SKIP
"""

from __future__ import annotations

import io
import os
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd

from laya_eval.errors import ConfigError
from laya_eval.output.files import ResultsError, atomic_write_bytes
from laya_eval.checks import check_choice
from laya_eval import catalog

__all__ = [
    "TABLE_FORMATS",
    "check_table_format",
    "find_table",
    "read_table",
    "table_bytes",
    "table_path",
    "write_table",
]

TABLE_FORMATS = catalog.TABLE_FORMATS
_PARQUET_HINT = "install the parquet extra (pip install 'laya-eval[parquet]', which brings pyarrow) or use csv"


def _check_format(fmt: str) -> str:
    check_choice("table_format", fmt, TABLE_FORMATS)
    return fmt


def check_table_format(fmt: str) -> str:
    """``fmt`` if tables can be written in it here (a known format; pyarrow installed for parquet)."""
    if _check_format(fmt) == "parquet":
        _pyarrow()
    return fmt


def _pyarrow():
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError:
        raise ConfigError(f"parquet tables need pyarrow, which is not installed: {_PARQUET_HINT}.") from None
    return pyarrow


def _stem(path_stem: str | os.PathLike) -> Path:
    path = Path(path_stem)
    return path.with_suffix("") if path.suffix in (".csv", ".parquet") else path


def table_path(path_stem: str | os.PathLike, fmt: str) -> Path:
    """``path_stem`` with the extension of ``fmt`` (``.csv`` or ``.parquet``; a given extension is replaced)."""
    stem = _stem(path_stem)
    return stem.with_name(f"{stem.name}.{_check_format(fmt)}")


def _parquet_bytes(df: pd.DataFrame) -> bytes:
    pa = _pyarrow()
    table = pa.Table.from_pandas(df, preserve_index=False)
    buf = io.BytesIO()
    pa.parquet.write_table(
        table,
        buf,
        compression="zstd",
        compression_level=3,
        row_group_size=1 << 20,
        use_dictionary=True,
        write_statistics=True,
    )
    return buf.getvalue()


def write_table(df: pd.DataFrame, path_stem: str | os.PathLike, fmt: str = "csv") -> Path:
    """Write ``df`` as ``<path_stem>.csv`` or ``<path_stem>.parquet``, atomically; return the path.

    Parameters
    ----------
    df : DataFrame
        Written without its index.
    path_stem : path
        The file name without extension (an extension ``.csv`` / ``.parquet`` is replaced).
    fmt : {"csv", "parquet"}
        CSV with 8 significant digits (``float_format="%.8g"``); Parquet keeps float64 exactly
        and needs pyarrow.

    Returns
    -------
    Path
    """
    path = table_path(path_stem, fmt)
    return atomic_write_bytes(path, table_bytes(df, fmt))


def table_bytes(df: pd.DataFrame, fmt: str = "csv") -> bytes:
    """The bytes :func:`write_table` writes: CSV with 8 significant digits, or deterministic Parquet."""
    if _check_format(fmt) == "csv":
        return df.to_csv(index=False, float_format="%.8g", lineterminator="\n").encode()
    return _parquet_bytes(df)


def npz_bytes(arrays: dict[str, np.ndarray]) -> bytes:
    """The bytes of a ``.npz`` file (``numpy.load`` reads it) holding ``arrays``, the same bytes for the same arrays:
    every member carries the date 1980-01-01, where ``numpy.savez`` writes the time of writing."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, array in arrays.items():
            member = io.BytesIO()
            np.lib.format.write_array(member, np.ascontiguousarray(array), allow_pickle=False)
            info = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, member.getvalue())
    return buf.getvalue()


def find_table(path_or_stem: str | os.PathLike) -> Path:
    """The file a stem names: ``stem.csv`` or ``stem.parquet``, whichever exists (a full name is kept)."""
    path = Path(path_or_stem)
    if path.suffix in (".csv", ".parquet") and path.is_file():
        return path
    found = [table_path(path, fmt) for fmt in TABLE_FORMATS if table_path(path, fmt).is_file()]
    if not found:
        raise ResultsError(f"no table '{_stem(path)}.csv' or '{_stem(path)}.parquet' found.")
    if len(found) > 1:
        raise ResultsError(f"both {found[0]} and {found[1]} exist: remove the stale one.")
    return found[0]


def read_table(path_or_stem: str | os.PathLike) -> pd.DataFrame:
    """Read a table written by :func:`write_table` (CSV or Parquet; by full name or by stem).

    Empty CSV cells read as NaN, as :func:`pandas.read_csv` does by default. Given a stem, the
    one of ``stem.csv`` / ``stem.parquet`` that exists is read (both existing is an error).

    Raises
    ------
    ResultsError
        No such table, both formats present, or a file that is not a readable table.
    ConfigError
        A Parquet file and no pyarrow.
    """
    path = find_table(path_or_stem)
    if path.suffix == ".csv":
        try:
            return pd.read_csv(path)
        except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
            raise ResultsError(f"{path}: not a readable CSV ({exc}).") from None
    pa = _pyarrow()
    try:
        table = pa.parquet.read_table(path)
    except (pa.ArrowInvalid, OSError) as exc:
        raise ResultsError(f"{path}: not a readable Parquet file ({exc}).") from None
    return table.to_pandas()
