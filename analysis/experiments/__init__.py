"""The plug-ins: an experiment's own tables, figures and readings, one module each (experiment 12's large batches,
experiment 13's steps to a target in its two editions). The core (the modules directly in analysis/) names none of
them: the catalogue lists what each declares, and `import analysis` offers what each exports, by this loop.

A plug-in module may declare
    TABLES, FIGURES   its catalogue entries (analysis.entries.Table, Figure), listed by the report in the order of the
                      plug-ins' names, after the thesis's experiments' own
    EXPORTS           the names `import analysis as an` offers (an.<name>), e.g. for the notebooks
"""
from __future__ import annotations

import importlib
import pkgutil

#: every plug-in, in the order of its module's name
PLUGINS = tuple(importlib.import_module(f"{__name__}.{m.name}") for m in sorted(pkgutil.iter_modules(__path__),
                                                                             key=lambda m: m.name))


def entries(kind: str) -> tuple:
    """Every plug-in's TABLES or FIGURES, in the plug-ins' order."""
    return tuple(e for plugin in PLUGINS for e in getattr(plugin, kind, ()))


def exports() -> dict:
    """name -> object of every plug-in's EXPORTS (what `import analysis` offers)."""
    return {name: getattr(plugin, name) for plugin in PLUGINS for name in getattr(plugin, "EXPORTS", ())}
