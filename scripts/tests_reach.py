"""How a test file reaches a module other than by importing it (scripts/tests_index.py's helper):
by running the ``mm2py`` command with a command word (``mm2py.cli.<command>``), and by the HTTP
routes of the REST API it calls (``rest_api/``'s route decorators). Read from the source alone.
"""

from __future__ import annotations

import ast
import itertools
import re
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path

#: the command's entries, each calling the next: ``python -m mm2py`` (``mm2py/__main__.py``) and the
#: ``mm2py`` script enter through ``mm2py.command``, which calls ``mm2py.cli.main``, as ``python -m
#: mm2py.cli`` (``mm2py/cli/__main__.py``) does
ENTRIES = {"mm2py.__main__": "mm2py.command", "mm2py.command": "mm2py.cli", "mm2py.cli.__main__": "mm2py.cli"}
#: the calls that start a process (``subprocess.run``, ``asyncio.create_subprocess_exec``, ...)
SPAWNS = frozenset({"run", "Popen", "call", "check_call", "check_output", "create_subprocess_exec"})
#: the HTTP methods a route decorator or a test's client is named after
METHODS = ("get", "post", "put", "patch", "delete")


def scripts(pyproject: Path) -> dict[str, str]:
    """``[project.scripts]``: the installed commands and the module each enters by."""
    table = tomllib.loads(pyproject.read_text()).get("project", {}).get("scripts", {})
    return {name: target.split(":")[0] for name, target in table.items()}


def commands(modules: dict[str, Path]) -> dict[str, str]:
    """The ``mm2py`` command's words and their modules: each ``mm2py.cli.<name>`` that adds a parser
    (``def add_parser``) is the command ``<name>`` with ``-`` for ``_`` (``flow-offsets``)."""
    words = {}
    for module, path in modules.items():
        package, _, leaf = module.rpartition(".")
        if package == "mm2py.cli" and any(
                isinstance(n, ast.FunctionDef) and n.name == "add_parser"
                for n in ast.parse(path.read_text(), str(path)).body):
            words[leaf.replace("_", "-")] = module
    return words


def entered(start: str) -> set[str]:
    """``start`` and the command's entries it calls (:data:`ENTRIES`)."""
    found = {start}
    while start in ENTRIES:
        start = ENTRIES[start]
        found.add(start)
    return found


def _sequences(tree: ast.AST) -> Iterator[list[ast.expr]]:
    """Every call's positional arguments and every list's or tuple's items."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            yield node.args
        elif isinstance(node, ast.List | ast.Tuple):
            yield node.elts


def _text(node: ast.expr) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def entries_run(tree: ast.AST, known: set[str], executables: dict[str, str]) -> set[str]:
    """The command's entries ``tree`` runs: ``"-m", "<module>"`` runs ``<module>.__main__`` too, and
    a process started with an installed script (``subprocess.run(["mm2py", "run", ...])``) its module."""
    found: set[str] = set()
    for items in _sequences(tree):
        for a, b in itertools.pairwise(items):
            if _text(a) == "-m" and f"{_text(b)}.__main__" in known:
                found |= entered(f"{_text(b)}.__main__")
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args and _name(node.func) in SPAWNS:
            first = node.args[0]
            line = first.elts if isinstance(first, ast.List | ast.Tuple) else node.args
            if line and (script := _text(line[0])) in executables:
                found |= entered(executables[script])
    return found


def _name(func: ast.expr) -> str | None:
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None


def words_run(tree: ast.AST, words: dict[str, str], executables: dict[str, str]) -> set[str]:
    """The commands ``tree`` runs, for a file that reaches the command's entry: a command word that
    follows the command (``"-m", "mm2py.cli", "run"``, ``["mm2py", "run"]``), or that is the first
    string of a command line, arguments following it (``main(["run", "-c", path])``,
    ``cli(capsys, "flow-offsets", "get")``)."""
    leads = {"mm2py", "mm2py.cli", *executables}
    found = set()
    for items in _sequences(tree):
        texts = [(i, _text(node)) for i, node in enumerate(items) if _text(node) is not None]
        for n, (i, text) in enumerate(texts):
            if text not in words:
                continue
            after_command = i > 0 and _text(items[i - 1]) in leads
            first_of_line = n == 0 and i + 1 < len(items)
            if after_command or first_of_line:
                found.add(words[text])
    return found


#: a route: its method, its path as a pattern, the module that declares it
Route = tuple[str, re.Pattern[str], str]


def routes(modules: dict[str, Path], prefix: str = "mm2py.rest_api") -> list[Route]:
    """Every route of the REST API: (method, its path as a pattern, the module that declares it),
    from the decorators ``@<router>.<method>("<path>")`` in ``prefix``'s modules."""
    found = []
    for module, path in modules.items():
        if module != prefix and not module.startswith(f"{prefix}."):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            for deco in getattr(node, "decorator_list", []):
                if (isinstance(deco, ast.Call) and isinstance(deco.func, ast.Attribute)
                        and deco.func.attr in METHODS and deco.args and (route := _text(deco.args[0]))):
                    pattern = re.sub(r"\\\{[^/]*?\\\}", "[^/]+", re.escape(route))
                    found.append((deco.func.attr.upper(), re.compile(f"{pattern}/?"), module))
    return found


def _path(node: ast.expr) -> str | None:
    """A request's path: a string, or an f-string whose values stand for one segment each (a leading
    value is the base address, left out); None unless it starts with ``/``."""
    text = _text(node)
    if isinstance(node, ast.JoinedStr):
        parts = list(node.values)
        if parts and isinstance(parts[0], ast.FormattedValue):
            parts.pop(0)
        text = "".join(_text(p) or "x" for p in parts)
    return text.split("?")[0] if text and text.startswith("/") else None


def requests_made(tree: ast.AST) -> set[tuple[str, str]]:
    """The HTTP requests ``tree`` makes: ``<client>.<method>(path, ...)``, and a call naming its method
    before the path (``client.request("GET", path)``, ``Call("read", "GET", path)``)."""
    found = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        if (isinstance(node.func, ast.Attribute) and node.func.attr in METHODS and node.args
                and (path := _path(node.args[0])) is not None):
            found.add((node.func.attr.upper(), path))
        for a, b in itertools.pairwise(node.args):
            if (method := _text(a)) and method.lower() in METHODS and (path := _path(b)) is not None:
                found.add((method, path))
    return found


def routes_called(tree: ast.AST, table: list[Route],
                  rewrites: dict[str, Callable[[str], str | None]]) -> set[str]:
    """The modules whose routes ``tree``'s requests match. ``rewrites``: a module whose middleware
    rewrites a path before routing -> its rewrite (None for a path it leaves as it is)."""
    found = set()
    for method, path in requests_made(tree):
        for module, rewrite in rewrites.items():
            if (new := rewrite(path)) is not None:
                path = new
                found.add(module)
        found.update(m for verb, pattern, m in table if verb == method and pattern.fullmatch(path))
    return found
