"""Tables as CSV or Parquet: CSV bytes as always, Parquet deterministic, both read back as the same frame."""

from __future__ import annotations

import sys

import numpy as np
import pandas as pd
import pytest

from laya_eval.errors import ConfigError, ResultsError
from laya_eval.output.tables import read_table, table_path, write_table


def _frame(n=50, seed=0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    spearman = rng.uniform(-1, 1, n)
    spearman[::7] = np.nan  # undefined rho: an empty CSV cell, a null in Parquet
    return pd.DataFrame(
        {
            "sample": np.arange(n, dtype=np.int64),
            "method": rng.choice(["laya", "ig"], n),
            "layer": rng.integers(1, 4, n),
            "attribution": rng.normal(size=n) * 1e-3,
            "spearman": spearman,
            "top1_hit": rng.random(n) < 0.5,
        }
    )


def test_csv_bytes_are_exactly_the_historical_format(tmp_path):
    df = _frame()
    path = write_table(df, tmp_path / "layers", "csv")
    assert path == tmp_path / "layers.csv"
    assert path.read_bytes() == df.to_csv(index=False, float_format="%.8g", lineterminator="\n").encode()
    assert table_path(tmp_path / "x.csv", "parquet") == tmp_path / "x.parquet"


def test_parquet_and_csv_read_back_equal_frame_for_frame(tmp_path):
    pytest.importorskip("pyarrow")
    df = _frame()
    csv = read_table(write_table(df, tmp_path / "a", "csv"))
    pq = read_table(write_table(df, tmp_path / "b", "parquet"))
    assert list(pq.columns) == list(csv.columns) == list(df.columns)
    assert list(pq.dtypes) == list(csv.dtypes)
    # CSV keeps 8 significant digits, Parquet every bit
    pd.testing.assert_frame_equal(pq, csv, check_exact=False, rtol=1e-7)
    pd.testing.assert_frame_equal(pq, read_table(tmp_path / "b"))  # by stem
    np.testing.assert_array_equal(pq["attribution"].to_numpy(), df["attribution"].to_numpy())


def test_parquet_bytes_are_deterministic(tmp_path):
    pytest.importorskip("pyarrow")
    a = write_table(_frame(), tmp_path / "a", "parquet").read_bytes()
    b = write_table(_frame(), tmp_path / "b", "parquet").read_bytes()
    assert a == b and a.startswith(b"PAR1")
    assert write_table(_frame(seed=1), tmp_path / "c", "parquet").read_bytes() != a


def test_table_errors(tmp_path, monkeypatch):
    with pytest.raises(ConfigError, match=r"table_format must be one of \{csv, parquet\}; got 'xlsx'"):
        write_table(_frame(), tmp_path / "t", "xlsx")
    with pytest.raises(ResultsError, match=r"no table '.*nope.csv' or '.*nope.parquet' found"):
        read_table(tmp_path / "nope")
    write_table(_frame(), tmp_path / "t", "csv")
    (tmp_path / "t.parquet").write_bytes(b"junk")
    with pytest.raises(ResultsError, match=r"both .*t.csv and .*t.parquet exist"):
        read_table(tmp_path / "t")
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # as if pyarrow were not installed
    with pytest.raises(ConfigError, match=r"parquet tables need pyarrow.*pip install 'laya-eval\[parquet\]'"):
        write_table(_frame(), tmp_path / "u", "parquet")
