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
>>> done = report(["runs/laya", "runs/scalarmix", "sanity/laya"], out="report/")  # doctest: +SKIP
>>> done.files[-1], done.warnings                                               # doctest: +SKIP

May import: errors, catalog, version, output, stats, figures, sanity_checks.
"""

from laya_eval.reporting.mixer_sections import MixerRun, load_mixer_run, mixer_verdicts
from laya_eval.reporting.render import DECIMALS
from laya_eval.reporting.runs import ReportInputs, Run, load_inputs, load_run, load_runs, run_from_result
from laya_eval.reporting.sanity_verdicts import SanityRun, load_sanity, sanity_table
from laya_eval.reporting.significance import significance_matrix
from laya_eval.reporting.tables import ReportTables, agreement_matrix, report_tables
from laya_eval.reporting.write import ReportResult, report, report_figures

__all__ = [
    "DECIMALS",
    "MixerRun",
    "ReportInputs",
    "ReportResult",
    "ReportTables",
    "Run",
    "SanityRun",
    "agreement_matrix",
    "load_inputs",
    "load_mixer_run",
    "load_run",
    "load_runs",
    "load_sanity",
    "mixer_verdicts",
    "report",
    "report_figures",
    "report_tables",
    "run_from_result",
    "sanity_table",
    "significance_matrix",
]
