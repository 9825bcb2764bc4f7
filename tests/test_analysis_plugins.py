"""Experiments plug in (issue 49): analysis's core (the modules directly in analysis/) names no experiment's module;
each plug-in of analysis/experiments/ declares its own entries, which the catalogue lists once; and the analysis
stays within six layers of imports (every import counts, also one inside a function, and the catalogue's loop over
the plug-ins counts as an import of each)."""
from __future__ import annotations

import functools

from analysis import catalogue as ct
from tests.helpers import REPO
from tests.test_architecture import import_graph

PLUGINS = "analysis.experiments"
MAX_LAYERS = 6


def analysis_graph() -> dict[str, set[str]]:
    """analysis's modules -> the analysis modules each imports; the catalogue also imports every plug-in it finds."""
    graph = {m: {t for t in targets if t.split(".")[0] == "analysis"} for m, targets in import_graph().items()
             if m.split(".")[0] == "analysis"}
    graph["analysis.catalogue"] |= {m for m in graph if m.startswith(PLUGINS + ".")}
    return graph


def layers(graph: dict[str, set[str]]) -> int:
    """The modules on the longest chain of imports (a module importing none is one layer)."""
    @functools.cache
    def depth(module: str) -> int:
        return 1 + max((depth(t) for t in graph[module]), default=0)
    return max(map(depth, graph))


def test_layers_counts_the_longest_chain():
    assert layers({"a": {"b", "c"}, "b": {"c"}, "c": set(), "d": set()}) == 3
    assert layers({"a": set()}) == 1


def test_the_analysis_has_at_most_six_layers_of_imports():
    assert layers(analysis_graph()) <= MAX_LAYERS


def test_the_core_names_no_plugin():
    """No core module imports a plug-in or names one (the catalogue finds them by its loop over the package)."""
    stems = [p.__name__.rpartition(".")[2] for p in ct.PLUGINS]
    core = sorted((REPO / "analysis").glob("*.py"))
    wrong = [f"{path.name}: {line.strip()}" for path in core for line in path.read_text().splitlines()
             if "from .experiments import" in line or any(f"experiments.{s}" in line or f"experiments import {s}"
                                                          in line for s in stems)]
    assert not wrong, wrong
    imports = [f"{m} imports {t}" for m, targets in analysis_graph().items() if m.count(".") <= 1
               and m != "analysis.catalogue" for t in targets if t.startswith(PLUGINS + ".")]
    assert not imports, imports


def test_every_plugin_declares_entries_the_catalogue_lists_once():
    assert {p.__name__ for p in ct.PLUGINS} >= {f"{PLUGINS}.large_batch", f"{PLUGINS}.steps_to_target"}
    for kind, listed in (("TABLES", ct.TABLES), ("FIGURES", ct.FIGURES)):
        names = [e.name for e in listed]
        assert len(names) == len(set(names)), kind
        for plugin in ct.PLUGINS:
            assert all(e in listed for e in getattr(plugin, kind, ())), (plugin.__name__, kind)


def test_import_analysis_offers_each_plugins_exports():
    import analysis as an

    for plugin in ct.PLUGINS:
        for name in getattr(plugin, "EXPORTS", ()):
            assert getattr(an, name) is getattr(plugin, name)
