"""Experiments plug in (issues 49, 65): analysis's core (the modules directly in analysis/) names no experiment -- no
plug-in module, no experiment's number, folder or name in its code (an ast scan; docstrings and comments aside); each
plug-in of analysis/experiments/ declares its own entries, which the catalogue lists once; and the analysis stays
within six layers of imports (every import counts, also one inside a function, and the catalogue's loop over the
plug-ins counts as an import of each)."""
from __future__ import annotations

import ast
import functools
import re

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


# ---- the core names no experiment ------------------------------------------------------------------------------------
SLUGS = sorted({p.name[3:] for p in (REPO / "experiments").glob("[0-9][0-9]_*")})  # naive_scaling, large_batch ...
NUMBERED = re.compile(r"(?i)(^|[^a-z])exp(eriment)?s?_?\d")  # exp7_peers, exp12, experiment_5 ...
SAID = re.compile(r"(?i)\b(exp(eriments?)?\s?_?\d+|\d\d_[a-z]+_[a-z])")  # "exp 5", "experiments 4-9", "05_linear_..."
EXPERIMENT_WORDS = {"exp", "experiment", "experiments", "exps"}  # a frame column, an attribute or a parameter so named


def about_experiments(node) -> bool:
    """df["exp"], r.experiment, exp: an expression that holds experiment numbers."""
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
        return node.slice.value in EXPERIMENT_WORDS
    return getattr(node, "attr", getattr(node, "id", None)) in EXPERIMENT_WORDS


def numbers_in(node) -> bool:
    """A literal number, or a tuple, list, set, range or sum of them holding one: (4,), [exp, 1], range(1, 10)."""
    if isinstance(node, ast.Constant):
        return type(node.value) is int
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(numbers_in(e) for e in node.elts)
    if isinstance(node, ast.Starred):
        return numbers_in(node.value)
    if isinstance(node, ast.BinOp):
        return numbers_in(node.left) or numbers_in(node.right)
    if isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("range", "tuple", "list", "set"):
        return any(numbers_in(a) for a in node.args)
    return False


def docstrings(tree) -> set[int]:
    kinds = (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    return {id(n.body[0].value) for n in ast.walk(tree) if isinstance(n, kinds) and n.body
            and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}


def parameters(trees) -> dict[str, list[str]]:
    """function or dataclass name -> its positional parameters' (fields') names, over the whole analysis."""
    found = {}
    for tree in trees:
        for n in ast.walk(tree):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found[n.name] = [a.arg for a in n.args.posonlyargs + n.args.args]
            elif isinstance(n, ast.ClassDef):
                found[n.name] = [f.target.id for f in n.body if isinstance(f, ast.AnnAssign)
                                 and isinstance(f.target, ast.Name)]
    return found


def named(node) -> str | None:
    for attr in ("id", "attr", "name", "arg", "asname"):
        if isinstance(getattr(node, attr, None), str):
            return getattr(node, attr)
    return None


def experiments_named(source: str, params: dict[str, list[str]]) -> list[str]:
    """Where a module's code names an experiment: a name or string that says one (exp7_*, "exp 5", a folder's
    "05_linear_scaling" or its slug), a number compared with or given as an experiment (df["exp"] == 5,
    .between(4, 9), epoch_rows(df, 5), Table(..., (4,), ...)), a number kept under an experiment's name."""
    tree, hits = ast.parse(source), []
    skip = docstrings(tree)
    for n in ast.walk(tree):
        name, line = named(n), getattr(n, "lineno", 0)
        if name and (NUMBERED.search(name) or any(slug in name.lower() for slug in SLUGS)):
            hits.append(f"{line}: name {name}")
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in skip and (
                SAID.search(n.value) or any(slug in n.value.lower() for slug in SLUGS)):
            hits.append(f"{line}: string {n.value[:50]!r}")
        if isinstance(n, ast.Compare) and any(map(about_experiments, [n.left, *n.comparators])) and any(
                numbers_in(side) for side in [n.left, *n.comparators]):
            hits.append(f"{line}: compared {ast.unparse(n)[:50]}")
        if isinstance(n, ast.Call):
            hits += [f"{line}: given {ast.unparse(n)[:50]}"] * given_experiments(n, params)
        if isinstance(n, (ast.Assign, ast.AnnAssign)) and n.value is not None and numbers_in(n.value) and any(
                re.search(r"(?i)exp", named(t) or "") for t in getattr(n, "targets", [getattr(n, "target", None)])):
            hits.append(f"{line}: kept {ast.unparse(n)[:50]}")
    return hits


def given_experiments(call: ast.Call, params: dict[str, list[str]]) -> int:
    """How many of a call's arguments give experiment numbers: to a method of an experiment column (df["exp"].isin),
    or to a parameter or field named for experiments."""
    if isinstance(call.func, ast.Attribute) and about_experiments(call.func.value):
        return sum(numbers_in(a) for a in call.args)
    names = params.get(named(call.func) or "", [])
    return sum(numbers_in(a) for i, a in enumerate(call.args) if i < len(names) and names[i] in EXPERIMENT_WORDS) \
        + sum(numbers_in(k.value) for k in call.keywords if k.arg in EXPERIMENT_WORDS)


def test_the_scan_finds_an_experiment_named_in_each_way():
    params = {"epoch_rows": ["df", "exp"], "Table": ["name", "thesis", "experiments"]}
    for named_so in ("def exp7_peers(): pass", "LARGE_BATCH = 12", "x = 'exp 5, 1 worker'",
                     "x = 'results/05_linear_scaling'", "ok = df['exp'] == 5", "ok = df['exp'].between(4, 9)",
                     "ok = r.experiment > 9", "rows = epoch_rows(df, 5, gpus=1)", "QUALITY_EXPERIMENTS = (4, 5)",
                     "t = Table('x', '', (1, 2, 3), make)", "t = Table('x', '', experiments=QUALITY + (12,))",
                     "ones = df['exp'].isin([exp, 1])", "steps = f(df, experiments=range(4, 10))"):
        assert experiments_named(named_so, params), named_so
    for says_none in ('"""Experiment 12: a docstring says what it is about."""', "x = df['exp'] == exp",
                      "y = rows.iloc[0]", "n = entries[0]['experiment']", "t = Table('x', '', EXPERIMENTS, make)",
                      "z = f'exp {n}'", "w = name[:2]"):
        assert not experiments_named(says_none, params), says_none


def test_the_core_names_no_experiment():
    params = parameters([ast.parse(p.read_text()) for p in (REPO / "analysis").rglob("*.py")])
    named_in = {p.name: experiments_named(p.read_text(), params) for p in sorted((REPO / "analysis").glob("*.py"))}
    assert {name: hits for name, hits in named_in.items() if hits} == {}
