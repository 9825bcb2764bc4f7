"""The house rules of docs/architecture.md, read from the code: which room may import which, no import circle, no
long function. Every import counts, also those inside functions."""
from __future__ import annotations

import ast
from pathlib import Path

from tests.helpers import REPO

# Each room and the rooms it may import from (besides itself). The floors of docs/architecture.md, bottom up.
MAY_IMPORT = {
    # plug-in workloads (issue 66): model, data, arithmetic; the lowest floor, so the contract may read their
    # declarations (model names, data kinds, tokens a sample) and the trainers build from them
    "workloads": set(),
    "contract": {"workloads"},
    "slurm": set(),
    "trainers": {"contract", "workloads"},
    "analysis": {"contract", "workloads"},
    "studies": {"contract", "workloads", "trainers", "analysis", "slurm"},
    "tools": {"contract", "workloads", "trainers", "analysis", "studies", "slurm"},  # everything below (architecture.md)
    "suite": {"contract", "workloads", "slurm", "trainers", "analysis", "studies", "tools"},  # the front door
}
MAX_FUNCTION_LINES = 60  # issue 36: every function reads on one screen


def project_files() -> dict[str, Path]:
    """module name -> file, for every module of every room."""
    modules = {}
    for room in MAY_IMPORT:
        for path in sorted((REPO / room).rglob("*.py")):
            parts = list(path.relative_to(REPO).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


def imported_modules(name: str, path: Path, known: set[str]) -> set[str]:
    """The project modules `name` imports anywhere in its file (module level or inside functions), resolved to
    the longest known module name."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            # `from package import module` names the module; `from module import name` the module itself
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        else:
            continue
        for target in targets:
            parts = target.split(".")
            while parts and ".".join(parts) not in known:
                parts.pop()
            if parts and ".".join(parts) != name:
                found.add(".".join(parts))
    return found


def import_graph() -> dict[str, set[str]]:
    modules = project_files()
    return {name: imported_modules(name, path, set(modules)) for name, path in modules.items()}


def room(module: str) -> str:
    return module.split(".")[0]


def test_no_room_imports_a_room_above_it():
    wrong = [f"{module} imports {target}" for module, targets in import_graph().items()
             for target in sorted(targets) if room(target) != room(module) and room(target) not in MAY_IMPORT[room(module)]]
    assert not wrong, "imports that run up a floor or sideways:\n" + "\n".join(wrong)


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm: the graph's circles (components of more than one module)."""
    index, low, stack, on_stack, circles = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return circles


def test_there_is_no_import_circle():
    assert strongly_connected(import_graph()) == []


def test_the_circle_finder_finds_a_circle():
    assert strongly_connected({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_function_is_longer_than_80_lines():
    long = []
    for path in project_files().values():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(REPO)}:{node.lineno} {node.name} {lines} lines")
    assert not long, "\n".join(long)


def string_literals(path: Path) -> list[tuple[int, str]]:
    """(line, value) of each string constant in a file, the text parts of f-strings left out: a message naming a
    file in prose, or a lock file of its own such as f".{name}.lock", is not a run folder's name typed again."""
    tree = ast.parse(path.read_text(), str(path))
    in_fstrings = {id(part) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for part in node.values}
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in in_fstrings]


def test_each_run_folder_name_is_typed_only_in_the_run_folders_module():
    from contract import runfolder

    assert {"checkpoint.pt", "console.log", "train.log", ".lock"} <= set(runfolder.FILES)
    owner = REPO / "contract" / "runfolder.py"
    typed_again = [f"{path.relative_to(REPO)}:{line} {value!r}"
                   for path in project_files().values() if path != owner
                   for line, value in string_literals(path) if value in runfolder.FILES]
    assert not typed_again, "use contract.runfolder's constants:\n" + "\n".join(typed_again)


def test_the_distributed_backends_are_listed_only_in_the_config():
    from contract.config import DISTRIBUTED_BACKENDS

    owner = REPO / "contract" / "config.py"
    listed_again = [f"{path.relative_to(REPO)}:{node.lineno}"
                    for path in project_files().values() if path != owner
                    for node in ast.walk(ast.parse(path.read_text(), str(path)))
                    if isinstance(node, (ast.Tuple, ast.List, ast.Set))
                    and [getattr(e, "value", None) for e in node.elts] == list(DISTRIBUTED_BACKENDS)]
    assert not listed_again, "use contract.config.DISTRIBUTED_BACKENDS:\n" + "\n".join(listed_again)


def test_the_launch_check_has_one_name():
    """One `check_launch` (issue 65): the trainer's checks of a run against where it starts (trainers/checks.py); a
    check of the config on its own says what it checks under a name of its own, so a reader never opens the wrong
    one."""
    defined = [f"{path.relative_to(REPO)}:{node.lineno}" for path in project_files().values()
               for node in ast.walk(ast.parse(path.read_text(), str(path)))
               if isinstance(node, ast.FunctionDef) and node.name == "check_launch"]
    assert [where.split(":")[0] for where in defined] == ["trainers/checks.py"], defined
