"""The plug-ins: an experiment's own tables, figures and readings, one module each (experiment 12's large batches,
experiment 13's steps to a target in its two editions). The core (the modules directly in analysis/) names none of
them: the catalogue's loop over this package (analysis/catalogue.py PLUGINS) finds each, lists what each declares,
and `import analysis` offers what each exports.

A plug-in module may declare
    TABLES, FIGURES   its catalogue entries (analysis.entries.Table, Figure), listed by the report in the order of the
                      plug-ins' names, after the thesis's experiments' own
    EXPORTS           the names `import analysis as an` offers (an.<name>), e.g. for the notebooks
    FROZEN            a superseded edition's files, kept as last drawn (analysis.frozen.Frozen): the committed report
                      copies them in, instead of entries whose code is gone
"""
