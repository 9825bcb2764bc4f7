"""The plug-ins: every experiment's own part of the analysis, one module per experiment or family -- throughput.py
(experiments 1-3), quality.py and quality_readings.py (4-9: their entries and drawing; the thesis's findings and the
RQ1/RQ3 readings), pilots.py (10-11), large_batch.py (12), steps_to_target_e2.py (13; steps_to_target.py, its first
edition, kept as files). The core (the modules directly in analysis/) names none of them and no experiment: the
catalogue's loop over this package (analysis/catalogue.py PLUGINS) finds each, in the order of its first experiment,
lists what each declares, and `import analysis` offers what each exports.

A plug-in module may declare (the types: analysis/entries.py, the one plug-in API)
    EXPERIMENTS       its experiments (Experiment): how their runs are measured, a baseline, headline words
    TABLES, FIGURES   its catalogue entries (Table, Figure), each in a part of the report (entries.PARTS)
    FINDINGS          its findings (Finding: comparisons of a treated and a control side, Runs, and the direction
                      that supports it), rows of the verdict table
    QUESTIONS         its research questions' web pages (analysis.page.Question)
    NOTEBOOKS         its notebooks, file name -> cells
    EXPORTS           the names `import analysis as an` offers (an.<name>), e.g. for the notebooks' cells
    FROZEN            a superseded edition's files, kept as last drawn (analysis.frozen.Frozen): the committed report
                      copies them in, instead of entries whose code is gone

Adding experiment N is a folder experiments/NN_name/ and one module here; no core file changes.
"""
