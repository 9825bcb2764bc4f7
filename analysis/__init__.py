"""Analysis of the scaling study: run folders and thesis-era logs -> one DataFrame -> tables, figures, notebooks.

    import analysis as an
    df = an.load_study("results/runs")      # one tidy frame (see analysis.runs)
    ref = an.load_reference()               # the thesis's Tables 1-15
    an.tables.quality_table(df, ref, 12)    # Table 12 with our runs beside it
    an.rq4_reading(...)                     # an experiment's own reading, offered by its plug-in
"""
from . import catalogue, figures, findings, numbers, reference, tables  # noqa: F401
from .catalogue import orderings, verdict_table  # noqa: F401
from .compare import comparison_text, load_report_study, made_from  # noqa: F401
from .logs import ParsedLog, parse_log  # noqa: F401
from .numbers import numerics_label  # noqa: F401
from .nbhelpers import overview, show, subplots  # noqa: F401
from .readings import markdown  # noqa: F401
from .reference import load_reference  # noqa: F401
from .runs import load_log, load_logs, load_runs, load_study  # noqa: F401
globals().update(catalogue.plugin_exports())  # each experiment's own readings and figures (analysis/experiments/), an.<name>
