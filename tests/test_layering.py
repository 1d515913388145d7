"""The package's modules import only downward: no import circle, counting imports inside functions (those under
``if TYPE_CHECKING:`` aside), and the layers below the package's front door never import it."""
from __future__ import annotations

import ast
from pathlib import Path

import sepbench

ROOT = Path(sepbench.__file__).resolve().parent
PACKAGE = ROOT.name


def module_files() -> dict[str, tuple[Path, bool]]:
    """Every module of the package by dotted name, with its file and whether it is a package's ``__init__``."""
    found = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        found[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return found


MODULES = module_files()


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imported_names(name: str) -> set[str]:
    """The dotted names ``name`` imports anywhere in its file, relative imports resolved; a ``from a import b``
    names the module ``a.b`` when there is one, else ``a``."""
    path, is_package = MODULES[name]
    here = name.split(".") if is_package else name.split(".")[:-1]
    names: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                for branch in child.orelse:
                    visit_node(branch)
            else:
                visit_node(child)

    def visit_node(node: ast.AST) -> None:
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(here[:len(here) - node.level + 1] + [node.module or ""]).strip(".") if node.level \
                else node.module
            modules = [f"{base}.{alias.name}" for alias in node.names]
            names.update(m for m in modules if m in MODULES)
            if not all(m in MODULES for m in modules):
                names.add(base)
        visit(node)

    visit(ast.parse(path.read_text()))
    return names


def imports_of(name: str) -> set[str]:
    """The package's modules ``name`` imports (a dotted name below a module counts as that module)."""
    found = set()
    for imported in _imported_names(name):
        parts = imported.split(".")
        while parts and ".".join(parts) not in MODULES:
            parts.pop()
        if parts:
            found.add(".".join(parts))
    found.discard(name)
    return found


GRAPH = {name: imports_of(name) for name in MODULES}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle as ``[a, b, ..., a]``, or None when the graph has none (depth-first search)."""
    state: dict[str, str] = {}
    trail: list[str] = []

    def walk(node: str) -> list[str] | None:
        state[node] = "open"
        trail.append(node)
        for target in sorted(graph[node]):
            if state.get(target) == "open":
                return trail[trail.index(target):] + [target]
            if target not in state and (cycle := walk(target)):
                return cycle
        state[node] = "done"
        trail.pop()
        return None

    for start in sorted(graph):
        if start not in state and (cycle := walk(start)):
            return cycle
    return None


def reachable(start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for target in GRAPH[todo.pop()] - seen:
            seen.add(target)
            todo.append(target)
    return seen


def test_the_finder_sees_a_circle_and_its_absence():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_imports_inside_functions_count_and_type_checking_ones_do_not():
    assert "sepbench.train.loop" in GRAPH["sepbench.train"]  # imported inside train() only
    assert "sepbench.config" not in GRAPH["sepbench.train"]  # imported under TYPE_CHECKING only


def test_no_import_circle_among_the_package_modules():
    cycle = find_cycle(GRAPH)
    assert cycle is None, "import circle: " + " -> ".join(cycle)


def test_store_and_theory_do_not_import_the_package_front_door():
    lower = ["sepbench.store"] + [name for name in MODULES if name.startswith("sepbench.theory")]
    reaching = [name for name in lower if PACKAGE in reachable(name)]
    assert reaching == [], f"these import the package's __init__ (directly or through others): {reaching}"
