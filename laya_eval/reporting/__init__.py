"""Reports over one or several ``faithfulness`` result folders: tables, figures, markdown and HTML.

A report may also take ``laya-eval sanity`` folders (recognised by their files; :func:`load_inputs`),
which add a "Sanity checks" section with a verdict per method (rules in :mod:`laya_eval.reporting.sanity_verdicts`),
and ``laya-eval mixers`` folders, which add a "Depth mixers" section: the map of mass and effect and, per mixer,
whether mass predicts effect (:mod:`laya_eval.reporting.mixer_sections`).
Runs that are seeds of one head get statistics across seeds (:mod:`laya_eval.reporting.seeds`), and every
run with paired tests a compact significance matrix (:mod:`laya_eval.reporting.significance`). The last section,
"Provenance", names the code that wrote each folder (:mod:`laya_eval.reporting.provenance_sections`).

A *run* is one result folder (layers, samples, summary, optional comparisons.csv, manifest.json;
layers and samples as CSV or Parquet)
or one in-memory :class:`~laya_eval.engine.evaluation.EvaluationResult`. The tables are
computed from the runs' CSVs and written as CSVs first; ``report.md`` and
``report.html`` then format exactly what those CSVs hold (fixed decimals), so
every number in the report can be traced to a file.

Examples
--------
>>> runs = load_runs(["runs/laya", "runs/scalarmix"])  # doctest: +SKIP
>>> write_report(runs, "report/")                      # doctest: +SKIP
>>> inputs = load_inputs(["runs/laya", "sanity/laya"])  # doctest: +SKIP
>>> write_report(inputs.runs, "report/", sanity=inputs.sanity)  # doctest: +SKIP

May import: errors, catalog, version, output, stats, figures, sanity_checks.
"""

from laya_eval.reporting.mixer_sections import MixerRun, load_mixer_run, mixer_verdicts
from laya_eval.reporting.render import DECIMALS
from laya_eval.reporting.runs import ReportInputs, Run, load_inputs, load_run, load_runs, run_from_result
from laya_eval.reporting.sanity_verdicts import SanityRun, load_sanity, sanity_table
from laya_eval.reporting.significance import significance_matrix
from laya_eval.reporting.tables import ReportTables, agreement_matrix, report_tables
from laya_eval.reporting.write import check_report_output, write_report

__all__ = [
    "DECIMALS",
    "MixerRun",
    "ReportInputs",
    "ReportTables",
    "Run",
    "SanityRun",
    "agreement_matrix",
    "check_report_output",
    "load_inputs",
    "load_mixer_run",
    "load_run",
    "load_runs",
    "load_sanity",
    "mixer_verdicts",
    "report_tables",
    "run_from_result",
    "sanity_table",
    "significance_matrix",
    "write_report",
]
