"""The house's shape, checked from the code's own imports.

Every module of flud/ (flud/storage/ and flud/aggregator/ included) is parsed (never imported) and
each import, at the top or inside a function, is an arrow. The test fails on
an import circle and on an arrow that runs to a room it may not enter (see
ALLOWED and docs/DESIGN.md, "The map of the house").
"""
import ast
import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
PACKAGES = ("flud",)
PURE = ("flud.storage", "flud.aggregator")   # import nothing of flud but each other

# Room -> the rooms it may import (besides itself). A room is a package under
# flud/ (flud.client, flud.node, ...), or "flud.core" for the modules directly
# in flud/ (errors, crypto, coding, keys, memory, workers, lean, procfs...).
# flud.storage and flud.aggregator are the pure rooms. Imports run downward
# only: cli at the top, then the testnet harness, then client and node (peers: never each other), then
# protocol, then the core, then storage and aggregator (pure).
ALLOWED = {
    "flud.storage": set(),
    "flud.aggregator": {"flud.storage"},
    "flud.core": {"flud.storage"},
    "flud.protocol": {"flud.core", "flud.storage"},
    # the overlay's Kademlia logic: pure, sans I/O (node and client may use it)
    "flud.overlay": {"flud.core"},
    # trust and fairness (placement rules, reputation, certificates, the
    # give-to-get ledger): pure, sans I/O (node and client may use it)
    "flud.trust": {"flud.core"},
    "flud.node": {"flud.trust", "flud.overlay", "flud.protocol", "flud.core", "flud.storage"},
    "flud.client": {"flud.trust", "flud.overlay", "flud.protocol", "flud.core", "flud.aggregator", "flud.storage"},
    "flud.testnet": {"flud.node", "flud.client", "flud.protocol", "flud.core"},
    # the network lab (namespaces, NAT routers): a harness beside testnet
    "flud.netlab": {"flud.testnet", "flud.node", "flud.client", "flud.overlay",
                    "flud.protocol", "flud.core"},
    # the long-running client: beside cli (which starts it), above client;
    # it runs jobs as `flud` processes and never imports the node
    "flud.agent": {"flud.client", "flud.protocol", "flud.core"},
    "flud.cli": {"flud.netlab", "flud.trust", "flud.overlay", "flud.agent", "flud.testnet", "flud.node", "flud.client", "flud.protocol",
                 "flud.core", "flud.aggregator", "flud.storage"},
    "flud.entry": {"flud.cli"},   # flud/__main__.py
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def all_modules() -> dict:
    found = {}
    for package in PACKAGES:
        for directory, _, files in os.walk(REPO / package):
            for name in files:
                if name.endswith(".py"):
                    path = Path(directory) / name
                    found[module_name(path)] = path
    return found


def room_of(module: str) -> str:
    parts = module.split(".")
    if module == "flud.__main__":
        return "flud.entry"
    if len(parts) == 1:
        return "flud.core"   # flud/__init__.py
    if len(parts) == 2:
        # flud/cli.py or flud/testnet.py before they became packages count
        # as those rooms; every other module directly in flud/ is the core.
        return module if module in ALLOWED else "flud.core"
    return ".".join(parts[:2])


def raw_imports(path: Path) -> set:
    """Every dotted name path imports, at the top or inside a function
    (`from a.b import c` gives a.b and a.b.c)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def imports_of(path: Path, modules: dict) -> set:
    """The project modules that path imports (resolved to modules that exist)."""
    targets = set()
    for name in raw_imports(path):
        while name and name not in modules:
            name = name.rpartition(".")[0]
        if name:
            targets.add(name)
    return targets


def under(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


@pytest.fixture(scope="module")
def graph() -> dict:
    modules = all_modules()
    assert "flud.errors" in modules and "flud.storage.errors" in modules, "the walk found no code"
    graph = {}
    for name, path in modules.items():
        graph[name] = {target for target in imports_of(path, modules)
                       if target != name and not name.startswith(target + ".")
                       and modules[target].name != "__init__.py"}
    return graph


def test_no_import_runs_to_a_room_it_may_not_enter(graph):
    wrong = []
    for source, targets in sorted(graph.items()):
        here = room_of(source)
        assert here in ALLOWED, f"{source}: room {here} has no rule in ALLOWED"
        for target in sorted(targets):
            there = room_of(target)
            if there != here and there not in ALLOWED[here]:
                wrong.append(f"{source} -> {target} ({here} may not import {there})")
    assert not wrong, "imports against the map of the house:\n" + "\n".join(wrong)


def test_there_is_no_import_circle(graph):
    circles = []
    state = {}   # module -> "open" while on the path, "done" after

    def visit(module, path):
        state[module] = "open"
        path.append(module)
        for target in sorted(graph.get(module, ())):
            if state.get(target) == "open":
                circles.append(path[path.index(target):] + [target])
            elif target not in state:
                visit(target, path)
        path.pop()
        state[module] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module, [])
    assert not circles, "import circles:\n" + "\n".join(" -> ".join(c) for c in circles)



# Inside flud/client: the jobs on top (each a package: backup, restore,
# verify, prune, repair) never import each other; under them the repository
# room (the repository as the nodes hold it: blobs, bundle sender and range
# reader, the map, head, snapshot lookup, tree walk, the version-1 reader),
# which imports no job; under both the client's floor (modules directly in
# flud/client/: network, placement, health, the local index, records,
# context, progress), which imports neither.
JOBS = ("flud.client.backup", "flud.client.restore", "flud.client.verify",
        "flud.client.prune", "flud.client.repair")
CLIENT_ALLOWED = {
    "flud.client": set(),
    "flud.client.repository": {"flud.client"},
    **{job: {"flud.client.repository", "flud.client"} for job in JOBS},
}
def client_room_of(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:3]) if len(parts) > 3 else "flud.client"


def test_client_jobs_never_import_each_other_and_the_repository_imports_no_job(graph):
    wrong = []
    for source, targets in sorted(graph.items()):
        if room_of(source) != "flud.client":
            continue
        here = client_room_of(source)
        assert here in CLIENT_ALLOWED, f"{source}: client room {here} has no rule"
        for target in sorted(targets):
            there = client_room_of(target)
            if room_of(target) == "flud.client" and there != here \
                    and there not in CLIENT_ALLOWED[here]:
                wrong.append(f"{source} -> {target} ({here} may not import {there})")
    assert not wrong, "imports against the client's map:\n" + "\n".join(wrong)


def test_the_client_rules_catch_a_job_importing_a_job():
    assert client_room_of("flud.client.prune.prune_job") == "flud.client.prune"
    assert "flud.client.repair" not in CLIENT_ALLOWED["flud.client.prune"]
    assert "flud.client.backup" not in CLIENT_ALLOWED["flud.client.repository"]
    assert client_room_of("flud.client.index") == "flud.client"

# Modules that must import nothing of a reactor: the sans-I/O protocol
# pieces (tested with plain bytes) and the pure packages.
SANS_IO = ("flud.protocol.codec", "flud.protocol.session", "flud.protocol.tls",
           "flud.protocol.messages", "flud.protocol.errors", "flud.protocol.requests")


def test_sans_io_modules_and_pure_packages_import_no_reactor():
    modules = all_modules()
    wrong = [f"{name} imports {sorted(n for n in raw_imports(path) if under(n, 'twisted.internet'))}"
             for name, path in sorted(modules.items())
             if (name in SANS_IO or room_of(name) in PURE)
             and any(under(n, "twisted.internet") for n in raw_imports(path))]
    assert not wrong, "\n".join(wrong)


def test_flud_is_the_one_top_level_package():
    """A `storage` or `aggregator` of our own installed into site-packages
    would collide with anyone else's: the pure rooms live under flud/."""
    tops = {path.name for path in REPO.iterdir()
            if (path / "__init__.py").exists() and path.name not in ("tests", "tools")}
    assert tops == {"flud"}
    assert 'include = ["flud*"]' in (REPO / "pyproject.toml").read_text()


def test_no_argv_parsing_below_the_cli():
    """The CLI turns argv into typed configs (NodeConfig...); below it
    nothing parses arguments."""
    wrong = [name for name, path in sorted(all_modules().items())
             if room_of(name) not in ("flud.cli", "flud.entry") and "argparse" in raw_imports(path)]
    assert wrong == []


def test_the_process_reader_imports_nothing_of_flud():
    """A node imports flud.procfs before anything else of flud (flud.lean)."""
    assert {n for n in raw_imports(REPO / "flud" / "procfs.py") if under(n, "flud")} == set()


def test_the_rules_catch_an_upward_import(tmp_path):
    """The checker itself: a module of the node that imports the client is
    reported (so the two tests above can fail)."""
    fake = {"flud.node.x": tmp_path / "x.py", "flud.client.y": tmp_path / "y.py"}
    fake["flud.node.x"].write_text("def f():\n    from flud.client.y import z\n")
    fake["flud.client.y"].write_text("z = 1\n")
    found = imports_of(fake["flud.node.x"], fake)
    assert found == {"flud.client.y"}
    assert room_of("flud.client.y") not in ALLOWED[room_of("flud.node.x")]
