"""docs/DESIGN.md's map of the house matches the tree: every module it names
exists where it says, and every module of flud/client/ is named in its room
(a newcomer reads the map first; a map that drifted sends them astray)."""
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
HEADER = re.compile(r"^    (flud/[a-z_/]*(?:__main__\.py)?)")
MODULE = re.compile(r"\b([a-z_0-9]+)\.py\b")


def map_rooms(text: str) -> dict:
    """{room directory (or file) as the map writes it: {module names}} from
    the indented block under "## The map of the house"."""
    section = text[text.index("## The map of the house"):]
    block = section[section.index("\n    flud/"):]
    rooms, room = {}, None
    for line in block.splitlines()[1:]:
        if line and not line.startswith(" "):
            break   # the block ends at the first unindented line
        header = HEADER.match(line)
        if header:
            room = header.group(1)
            rooms.setdefault(room, set())
            line = line[header.end():]
        if room is not None:
            rooms[room].update(MODULE.findall(line))
    return rooms


def test_every_module_the_map_names_exists():
    rooms = map_rooms((REPO / "docs" / "DESIGN.md").read_text())
    assert "flud/client/repository/" in rooms and "flud/client/" in rooms
    missing = []
    for room, names in rooms.items():
        if room.endswith(".py"):
            if not (REPO / room).exists():
                missing.append(room)
            continue
        missing += [f"{room}{name}.py" for name in sorted(names)
                    if not (REPO / room / f"{name}.py").exists()]
    assert missing == [], f"docs/DESIGN.md names modules that do not exist: {missing}"


def test_every_client_module_is_on_the_map():
    rooms = map_rooms((REPO / "docs" / "DESIGN.md").read_text())
    unnamed = []
    for directory in sorted([REPO / "flud" / "client",
                             *(p for p in (REPO / "flud" / "client").iterdir()
                               if (p / "__init__.py").exists())]):
        room = directory.relative_to(REPO).as_posix() + "/"
        named = rooms.get(room, set())
        unnamed += [f"{room}{path.name}" for path in sorted(directory.glob("*.py"))
                    if path.stem != "__init__" and path.stem not in named]
    assert unnamed == [], f"modules docs/DESIGN.md's map does not name: {unnamed}"


def test_the_map_reader_sees_a_missing_module():
    text = "## The map of the house\n\n    flud/client/    ghost.py, records.py\n\nprose\n"
    assert map_rooms(text) == {"flud/client/": {"ghost", "records"}}
