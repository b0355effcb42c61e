"""protocol/ is the floor client/ and node/ share: it imports neither of
them (nor the CLI or the testnet harness), and its sans-I/O modules import
nothing of twisted.internet. Read from the source, imports inside functions
included."""
import ast
from pathlib import Path

PROTOCOL = Path(__file__).resolve().parents[3] / "flud" / "protocol"
UPWARD = ("flud.client", "flud.node", "flud.cli", "flud.testnet", "flud.testnet_query")
SANS_IO = ("codec", "session", "tls", "messages", "errors", "requests")


def imports_of(path: Path) -> set:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def _under(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def test_protocol_imports_nothing_above_it():
    modules = sorted(PROTOCOL.glob("*.py"))
    assert len(modules) > 10
    for path in modules:
        upward = [n for n in imports_of(path) if any(_under(n, p) for p in UPWARD)]
        assert upward == [], f"{path.name} imports {upward}"


def test_the_sans_io_modules_import_no_reactor_machinery():
    for name in SANS_IO:
        found = [n for n in imports_of(PROTOCOL / f"{name}.py")
                 if _under(n, "twisted.internet")]
        assert found == [], f"{name}.py imports {found}"
