"""The process layer's import rules, read from the source (imports inside
functions count too): the CLI is the top; the testnet harness sits under it
and over the client and the node; nothing below the CLI parses argv."""
import ast
from pathlib import Path

FLUD = Path(__file__).resolve().parents[3] / "flud"


def imports_of(path: Path) -> set:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def modules(*excluded: str):
    for path in sorted(FLUD.rglob("*.py")):
        rel = path.relative_to(FLUD.parent).as_posix()
        if not any(rel == e or rel.startswith(e + "/") for e in excluded):
            yield rel, imports_of(path)


def under(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def test_nothing_below_the_cli_imports_it():
    wrong = [(rel, sorted(n for n in names if under(n, "flud.cli")))
             for rel, names in modules("flud/cli", "flud/__main__.py")]
    assert [w for w in wrong if w[1]] == []


def test_only_the_cli_uses_the_testnet_harness():
    wrong = [(rel, sorted(n for n in names if under(n, "flud.testnet")))
             for rel, names in modules("flud/cli", "flud/testnet")]
    assert [w for w in wrong if w[1]] == []


def test_the_harness_does_not_reach_up():
    wrong = [(rel, sorted(n for n in names if under(n, "flud.cli")))
             for rel, names in modules() if rel.startswith("flud/testnet/")]
    assert [w for w in wrong if w[1]] == []


def test_no_argparse_below_the_cli():
    assert [rel for rel, names in modules("flud/cli") if "argparse" in names] == []


def test_the_process_reader_is_low():
    assert {n for n in imports_of(FLUD / "procfs.py") if under(n, "flud")} == set()
