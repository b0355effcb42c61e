"""The --json contract (docs/json.md): every command's stdout, run on a small
testnet, is JSON lines that each match docs/json-schema.json; the summary
comes last; a long job prints a status line at least once a second; and
`flud stats` says what the data holds (restore size, dedup, bytes per node)."""
import json
import os

import pytest

from tests.integration.helpers import ROOT, flud, init_client, output, write_random

pytestmark = pytest.mark.integration
jsonschema = pytest.importorskip("jsonschema", reason="the schema check needs jsonschema "
                                                      "(pip install -e '.[test]')")
SCHEMA = os.path.join(ROOT, "docs", "json-schema.json")
LONG = {"backup", "restore", "verify", "check", "prune", "forget"}
MIB = 1024 * 1024


def lines_of(proc, validator) -> list:
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    assert lines, output(proc)
    for line in lines:
        problems = [e.message for e in validator.iter_errors(line)]
        assert not problems, (line, problems)
    assert lines[-1]["type"] == "summary" and lines[-1]["exit"] == proc.returncode
    assert all(line["type"] != "summary" for line in lines[:-1])
    if lines[-1]["command"] in LONG and not lines[-1].get("dry_run"):
        assert lines[0]["type"] == "status", output(proc)
    return lines


def test_every_command_speaks_the_documented_json(testnet_factory, tmp_path):
    with open(SCHEMA) as f:
        schema = json.load(f)
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    # the schema refuses what breaks the contract
    assert not validator.is_valid({"type": "summary", "schema": 1, "command": "ls",
                                   "time": "yesterday", "exit": 0, "snapshots": []})
    assert not validator.is_valid({"type": "status", "schema": 1, "command": "backup",
                                   "time": "2026-11-26T15:28:42.123Z"})
    net = testnet_factory(6, "json-net")
    home = tmp_path / "home"
    init_client(str(home), net, None, "--k", "2", "--n", "4")
    data = tmp_path / "data"
    (data / "docs").mkdir(parents=True)
    (data / "docs" / "a.txt").write_text("alpha " * 50)
    write_random(data / "big.bin", MIB, seed=7)
    (data / "big-copy.bin").write_bytes((data / "big.bin").read_bytes())   # deduplicated
    run = lambda *args: lines_of(flud(*args, "--home", home, "--json"), validator)  # noqa: E731

    dry = run("backup", data, "--dry-run")
    assert sorted(line["size"] for line in dry if line["type"] == "file") == [300, MIB, MIB]
    # (a status line every second: tests/unit/cli/test_jsonlines.py, on a clock)
    first = run("backup", data)
    assert first[0]["type"] == "status" and first[-1]["snapshot"] == 1
    run("ls")
    listing = run("ls", "--snapshot", "1", "--dir", "data")[-1]
    assert sorted(e["name"] for e in listing["entries"]) == ["big-copy.bin", "big.bin", "docs"]
    newest = run("ls", "--dir", "data/docs")[-1]   # no --snapshot: the newest's directory
    assert newest["snapshot"] == 1 and [e["name"] for e in newest["entries"]] == ["a.txt"]
    run("find", "*.txt")
    run("diff", "1", "1")
    run("verify")
    run("check")
    run("restore", "--to", tmp_path / "back")
    run("tag", "1", "--add", "kept")
    run("forget", "--keep-last", "5", "--dry-run")
    run("prune", "--dry-run")

    stats = run("stats")[-1]
    assert stats["snapshots_count"] == 1
    assert stats["total_file_count"] == 3 and stats["total_size"] == 300 + 2 * MIB
    assert stats["unique_file_count"] == 2 and stats["unique_size"] == 300 + MIB
    assert stats["dedup_ratio"] == round((300 + 2 * MIB) / (300 + MIB), 4)
    # k=2, n=4: about twice what is stored lies on the nodes, spread over them
    assert 1.9 < stats["expansion_ratio"] < 2.5
    assert len(stats["nodes"]) >= 4 and sum(n["bytes"] for n in stats["nodes"]) == \
        stats["total_node_bytes"]

    failed = flud("restore", "--home", home, "--to", tmp_path / "x", "--snapshot", "99",
                  "--json")
    lines = lines_of(failed, validator)
    assert lines[-1]["error"]["code"] and any(line["type"] == "error" for line in lines)
