"""tests/INDEX.md (each mm2py module with the test files that reach it: import it, run it or are named
after it, run the ``mm2py`` command with its word, request its HTTP routes, or import a tests/support
helper that reaches it) is what scripts/tests_index.py writes from the tree as it is now; and each way
of reaching, read from small synthetic trees."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def _script() -> Any:
    spec = importlib.util.spec_from_file_location("tests_index", ROOT / "scripts" / "tests_index.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_index_of_tests_by_module_is_fresh() -> None:
    expected = _script().render()
    assert (ROOT / "tests" / "INDEX.md").read_text() == expected, (
        "tests/INDEX.md is stale: run python scripts/tests_index.py")


def test_the_index_names_every_module_it_should() -> None:
    text = (ROOT / "tests" / "INDEX.md").read_text()
    assert "| `mm2py.client.fetcher` | " in text and "[unit/test_fetcher.py](unit/test_fetcher.py)" in text
    assert "| `tests.support.brokers` | " in text
    assert "| `mm2py.client` |" not in text  # a package that only re-exports


def _tree(root: Path, files: dict[str, str]) -> dict[str, Path]:
    """``files`` (path -> source) written under ``root``: dotted module name -> path."""
    modules = {}
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        parts = list(Path(name).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _reached(tmp_path: Path, files: dict[str, str], test: str) -> dict[str, str]:
    """What the test file ``test`` (source) reaches among ``files``: module -> how."""
    modules = _tree(tmp_path, files)
    support = {m: p for m, p in modules.items() if m.startswith("tests.support.")}
    path = tmp_path / "tests" / "unit" / "test_synthetic.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(test)
    reach: dict[str, str] = _script().Reach(modules, support, executables={"mm2py": "mm2py.command"}).of(path)
    return reach


_COMMAND = {
    "mm2py/__init__.py": "",
    "mm2py/__main__.py": "from mm2py.command import main\n",
    "mm2py/command.py": "def main() -> int:\n    return 0\n",
    "mm2py/cli/__init__.py": "def main(argv=None) -> int:\n    return 0\n",
    "mm2py/cli/__main__.py": "from mm2py.cli import main\n",
    "mm2py/cli/run.py": "def add_parser(sub):\n    pass\n",
    "mm2py/cli/flow_offsets.py": "def add_parser(sub):\n    pass\n",
    "mm2py/cli/audit.py": "def add_parser(sub):\n    pass\n",
    "mm2py/cli/demo.py": "def main() -> int:\n    return 0\n",  # no parser: not a command
}


def test_a_command_run_in_process_reaches_the_command_s_module(tmp_path: Path) -> None:
    test = ('from mm2py.cli import main\n\n'
            'def _cli(capsys, *args):\n    return main(list(args))\n\n'
            'def test_it(capsys):\n'
            '    assert main(["run", "-c", "x"]) == 0\n'
            '    _cli(capsys, "flow-offsets", "get")\n'
            '    unique("audit")\n')  # a lone word is no command line
    reached = _reached(tmp_path, _COMMAND, test)
    assert reached["mm2py.cli"] == ""
    assert reached["mm2py.cli.run"] == reached["mm2py.cli.flow_offsets"] == "via command"
    assert "mm2py.cli.audit" not in reached and "mm2py.cli.demo" not in reached


def test_a_command_run_in_a_process_reaches_its_entries_and_the_command_s_module(tmp_path: Path) -> None:
    test = ('import subprocess, sys\n\n'
            'def test_it():\n'
            '    subprocess.run([sys.executable, "-m", "mm2py", "audit", "-c", "x"])\n'
            '    subprocess.run(["mm2py", "run", "-c", "x"])\n'
            '    logging.getLogger("mm2py")\n')
    reached = _reached(tmp_path, _COMMAND, test)
    assert reached["mm2py"] == ""  # run by name
    assert {m: reached[m] for m in ("mm2py.__main__", "mm2py.command", "mm2py.cli", "mm2py.cli.audit",
                                     "mm2py.cli.run")} == dict.fromkeys(
        ("mm2py.__main__", "mm2py.command", "mm2py.cli", "mm2py.cli.audit", "mm2py.cli.run"), "via command")
    assert "mm2py.cli.__main__" not in reached


def test_command_words_count_only_in_a_file_that_runs_the_command(tmp_path: Path) -> None:
    test = 'def test_it():\n    assert other(["run", "-c", "x"]) == 0\n'
    assert "mm2py.cli.run" not in _reached(tmp_path, _COMMAND, test)


def test_a_helper_s_reach_counts_for_the_test_that_imports_it(tmp_path: Path) -> None:
    files = {
        **_COMMAND,
        "mm2py/engine.py": "",
        "mm2py/stores.py": "",
        "tests/support/__init__.py": "",
        "tests/support/inner.py": "import mm2py.engine\n",
        "tests/support/outer.py": ("import subprocess, sys\nfrom tests.support import inner\n\n"
                                   "def start(*args):\n    py = sys.executable\n"
                                   "    return subprocess.Popen([py, '-m', 'mm2py.cli', *args])\n"),
    }
    test = 'from tests.support.outer import start\n\ndef test_it():\n    start("run", "-c", "x")\n'
    reached = _reached(tmp_path, files, test)
    assert reached["tests.support.outer"] == ""
    via = "via tests/support/outer.py"
    assert reached["tests.support.inner"] == reached["mm2py.engine"] == reached["mm2py.cli.__main__"] == via
    assert reached["mm2py.cli.run"] == "via command"  # the test's own command line, through the helper
    assert "mm2py.stores" not in reached


def test_a_request_to_a_route_reaches_the_module_that_declares_it(tmp_path: Path) -> None:
    files = {
        "mm2py/__init__.py": "",
        "mm2py/rest_api/__init__.py": "",
        "mm2py/rest_api/control.py": ('def routes(router):\n'
                                      '    @router.get("/flows/{name}/offsets")\n'
                                      '    async def offsets(name: str) -> dict:\n        return {}\n'),
        "mm2py/rest_api/connectors.py": ('def routes(router):\n'
                                         '    @router.put("/connectors/{name}/pause", status_code=202)\n'
                                         '    async def pause(name: str) -> None:\n        pass\n'),
        "mm2py/rest_api/loggers.py": ('def routes(router):\n'
                                      '    @router.get("/admin/loggers")\n'
                                      '    async def loggers() -> dict:\n        return {}\n'),
    }
    test = ('def test_it(http, base, name):\n'
            '    http.get(f"/flows/{name}/offsets?x=1")\n'
            '    http.request("PUT", f"{base}/connectors/{name}/pause")\n'
            '    http.post("/admin/loggers")\n')  # no such route: a GET one
    reached = _reached(tmp_path, files, test)
    assert reached["mm2py.rest_api.control"] == reached["mm2py.rest_api.connectors"] == "via HTTP"
    assert "mm2py.rest_api.loggers" not in reached


def test_the_index_names_the_modules_no_test_reaches_at_its_top() -> None:
    text = (ROOT / "tests" / "INDEX.md").read_text()
    top, _, tables = text.partition("\n## mm2py\n")
    assert "\n## Not reached by any test\n" in top
    for line in top.split("## Not reached by any test")[1].splitlines():
        if line.startswith("- `"):
            assert f"| {line[2:]} | none |" in tables, line
    assert "| `mm2py.cli.run` | " in tables and "(via command)" in tables.split("| `mm2py.cli.run` | ")[1]
