"""Draw the operator-sensitivity figure of a ``faithfulness --ablation A,B,...`` result folder.

    python benchmarks/operators_figure.py RESULT_FOLDER OUT.png

Reads RESULT_FOLDER/operators.csv and prints the sentence the report writes under it.
"""

from __future__ import annotations

import sys
from pathlib import Path

from laya_eval.figures import operators_figure, save_figure
from laya_eval.reporting.operator_sections import OperatorTable, operator_sentence

import pandas as pd


def main(folder: str, out: str) -> None:
    table = pd.read_csv(Path(folder) / "operators.csv", keep_default_na=False, na_values=[""])
    operators = [c[len("faithfulness_") :] for c in table.columns if c.startswith("faithfulness_")]
    save_figure(operators_figure(table, operators, meta={"subtitle": Path(folder).name}), out)
    print(operator_sentence(OperatorTable(Path(folder).name, table, operators)))


if __name__ == "__main__":
    main(*sys.argv[1:3])
