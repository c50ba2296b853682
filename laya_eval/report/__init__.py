"""Reports over one or several ``faithfulness`` result folders: tables, figures, markdown and HTML.

A *run* is one result folder (layers, samples, summary, optional comparisons.csv, manifest.json;
layers and samples as CSV or Parquet)
or one in-memory :class:`~laya_eval.evaluate.EvaluationResult`. The tables are
computed from the runs' CSVs and written as CSVs first; ``report.md`` and
``report.html`` then format exactly what those CSVs hold (fixed decimals), so
every number in the report can be traced to a file.

Examples
--------
>>> runs = load_runs(["runs/laya", "runs/scalarmix"])  # doctest: +SKIP
>>> write_report(runs, "report/")                      # doctest: +SKIP
"""

from laya_eval.report.render import DECIMALS
from laya_eval.report.runs import Run, load_run, load_runs, run_from_result
from laya_eval.report.tables import ReportTables, agreement_matrix, report_tables
from laya_eval.report.write import write_report

__all__ = [
    "DECIMALS",
    "ReportTables",
    "Run",
    "agreement_matrix",
    "load_run",
    "load_runs",
    "report_tables",
    "run_from_result",
    "write_report",
]
