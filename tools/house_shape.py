"""Print the client's shape from the code's own imports (parsed, never run).

    python tools/house_shape.py [--root flud.client] [--top 15]
    HOUSE_SHAPE_REPO=/path/to/an/old/checkout python tools/house_shape.py

- import floors: floor 0 imports nothing of the root; a module's floor is
  one above the highest floor it imports (modules in a circle share one);
- circles: strongly connected groups of more than one module;
- modules and lines per room (the root's direct subpackages; the modules
  directly in the root are its own room);
- the longest functions (lines from `def` to the last line of the body);
- which jobs import which (a job is a room among JOBS).

Anyone can rerun it before and after a change; the numbers are what the
re-layering (issue 26) is judged by.
"""
import argparse
import ast
import os
import sys
from pathlib import Path

REPO = Path(os.environ.get("HOUSE_SHAPE_REPO") or Path(__file__).resolve().parents[1])
JOBS = ("backup", "restore", "verify", "prune", "repair", "check")


def modules_under(package: str) -> dict:
    """Every module of `package` (dotted), name -> path."""
    base = REPO.joinpath(*package.split("."))
    found = {}
    for directory, _, files in os.walk(base):
        for name in files:
            if name.endswith(".py"):
                path = Path(directory) / name
                parts = list(path.relative_to(REPO).with_suffix("").parts)
                if parts[-1] == "__init__":
                    parts.pop()
                found[".".join(parts)] = path
    return found


def imported_names(path: Path) -> set:
    names = set()
    tree = ast.parse(path.read_text(), str(path))
    package = ".".join(path.relative_to(REPO).with_suffix("").parts[:-1])
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                module = ".".join(base + ([module] if module else []))
            names.add(module)
            names.update(f"{module}.{alias.name}" for alias in node.names)
    return names


def import_graph(modules: dict) -> dict:
    graph = {}
    for name, path in modules.items():
        targets = set()
        for imported in imported_names(path):
            while imported and imported not in modules:
                imported = imported.rpartition(".")[0]
            if (imported and imported != name and not name.startswith(imported + ".")
                    and modules[imported].name != "__init__.py"):
                targets.add(imported)
        graph[name] = targets
    return graph


def strongly_connected(graph: dict) -> list:
    """Tarjan's algorithm, iterative; returns the components (lists)."""
    index, low, on_stack, stack, result = {}, {}, set(), [], []
    counter = [0]
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter[0]
                    counter[0] += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                result.append(component)
    return result


def floors(graph: dict) -> dict:
    components = strongly_connected(graph)
    component_of = {m: i for i, c in enumerate(components) for m in c}
    floor_of_component = {}
    # Tarjan emits components in reverse topological order (sinks first)
    for i, component in enumerate(components):
        below = [floor_of_component[component_of[t]] for m in component for t in graph[m]
                 if component_of[t] != i]
        floor_of_component[i] = 1 + max(below) if below else 0
    return {m: floor_of_component[component_of[m]] for m in graph}


def room_of(module: str, root: str) -> str:
    rest = module[len(root) + 1:].split(".") if module != root else []
    return rest[0] if len(rest) > 1 else "(" + root.rpartition(".")[2] + ")"


def longest_functions(modules: dict, top: int) -> list:
    found = []
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found.append((node.end_lineno - node.lineno + 1, f"{name}.{node.name}"))
    return sorted(found, reverse=True)[:top]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default="flud.client")
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args(argv)
    modules = modules_under(args.root)
    graph = import_graph(modules)
    floor = floors(graph)
    circles = [sorted(c) for c in strongly_connected(graph) if len(c) > 1]
    lines = {m: len(p.read_text().splitlines()) for m, p in modules.items()}

    print(f"{args.root}: {len(modules)} modules, {sum(lines.values())} lines, "
          f"{1 + max(floor.values(), default=-1)} import floors, {len(circles)} circles")
    for circle in circles:
        print("  circle:", " <-> ".join(circle))
    for level in range(max(floor.values(), default=-1) + 1):
        members = sorted(m[len(args.root) + 1:] or m for m in floor if floor[m] == level)
        print(f"  floor {level} ({len(members)}): {' '.join(members)}")

    print("rooms (modules, lines):")
    rooms = {}
    for module, count in lines.items():
        room = room_of(module, args.root)
        n, total = rooms.get(room, (0, 0))
        rooms[room] = (n + 1, total + count)
    for room, (n, total) in sorted(rooms.items(), key=lambda item: -item[1][1]):
        print(f"  {room:<16} {n:>3} {total:>6}")

    arrows = sorted({(room_of(s, args.root), room_of(t, args.root))
                     for s, targets in graph.items() for t in targets})
    room_graph = {room: set() for room in rooms}
    for a, b in arrows:
        if a != b:
            room_graph[a].add(b)
    room_floor = floors(room_graph)
    room_circles = [sorted(c) for c in strongly_connected(room_graph) if len(c) > 1]
    print(f"room floors: {1 + max(room_floor.values(), default=-1)}, "
          f"room circles: {len(room_circles)} {room_circles or ''}")
    for level in range(max(room_floor.values(), default=-1) + 1):
        print(f"  room floor {level}: {' '.join(sorted(r for r in room_floor if room_floor[r] == level))}")
    job_arrows = [(a, b) for a, b in arrows if a != b and a in JOBS and b in JOBS]
    print(f"jobs importing jobs: {len(job_arrows)}")
    for a, b in job_arrows:
        print(f"  {a} -> {b}")

    print(f"longest functions (lines):")
    for length, name in longest_functions(modules, args.top):
        print(f"  {length:>4} {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
