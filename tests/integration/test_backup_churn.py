"""Backups while holders stop, with real node processes (issue 25, finding 2).

Holders stopped right before a backup are still listed alive by the others;
the backup must exit 0 and every row of the map it publishes must name a
node that holds that share (checked by RETRIEVE and VERIFY on each node). With
4 of 16 nodes stopped a backup still exits 0 (no PlacementExhausted traceback)
and its snapshot restores identical."""
import json
import os
import random

import pytest

from tests.integration.helpers import (compare_trees, flud, init_client, manifest_of, output,
                                       tool, write_random)

pytestmark = pytest.mark.integration

NODES = 16


def _json_of(proc) -> dict:
    lines = proc.stdout.strip().splitlines()
    assert lines, output(proc)
    return json.loads(lines[-1])


def _small_files(root, rng, tag, count):
    for i in range(count):
        path = os.path.join(root, tag, f"d{i % 5}", f"f{i}.txt")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(rng.randbytes(rng.randint(1, 30_000)))


def _rows(manifest) -> list:
    """(node id hex, share key hex) of every bundle and extent share the
    snapshot's map names."""
    rows = [(node, key) for bundle in manifest["bundles"].values()
            for _, key, node in bundle["shares"]]
    for content in manifest["contents"].values():
        for extent in content.get("ext", ()):
            rows += [(node, key) for _, key, node in extent["shares"]]
    return rows


def _unstored(net, home, tmp_path, rows) -> dict:
    """{(node, key): why} of every row whose node does not serve that share."""
    by_node = {}
    for node, key in rows:
        by_node.setdefault(node, set()).add(key)
    bad = {}
    for node, keys in by_node.items():
        keyfile = tmp_path / f"{node[:12]}.keys"
        keyfile.write_text("\n".join(sorted(keys)) + "\n")
        index = net.index_of(node)
        if not net.node_alive(index):
            bad.update({(node[:12], key): "stopped" for key in keys})
            continue
        found = tool("check", net.addr(index), home, keyfile)
        bad.update({(node[:12], key): why for key, why in found.items() if why != "ok"})
    return bad


def test_holders_stopped_before_a_backup_are_never_named_and_four_down_still_backs_up(
        testnet_factory, tmp_path):
    net = testnet_factory(NODES)
    home = str(tmp_path / "home")
    init_client(home, net)
    rng = random.Random(25)
    src = tmp_path / "src"
    _small_files(src, rng, "first", 120)
    write_random(src / "first" / "big.bin", 3 * 1024 * 1024, 1)
    first = flud("backup", src, "--home", home, "--json")
    assert first.returncode == 0, output(first)

    # two nodes that hold shares go, just before the next backup: the others
    # still list them as alive
    before = set(_rows(manifest_of(home)))
    held = sorted({node for node, _ in before})
    stopped = [net.index_of(node) for node in held[:2]]
    for index in stopped:
        net.stop(index)
    _small_files(src, rng, "second", 150)
    second = flud("backup", src, "--home", home, "--json")
    assert second.returncode == 0, output(second)
    assert _json_of(second)["skipped"] == 0
    # what this backup stored (the first one's rows may name the stopped nodes)
    rows = set(_rows(manifest_of(home)))
    assert rows - before
    assert _unstored(net, home, tmp_path, rows - before) == {}

    # two more: 12 of 16 up, n = 8
    held = [node for node in held if net.index_of(node) not in stopped]
    for node in held[:2]:
        net.stop(net.index_of(node))
    _small_files(src, rng, "third", 150)
    write_random(src / "third" / "big.bin", 3 * 1024 * 1024, 2)
    third = flud("backup", src, "--home", home, "--json")
    assert third.returncode == 0, output(third)
    summary = _json_of(third)
    assert summary["exit"] == 0 and summary["reduced_redundancy"] == 0
    now = set(_rows(manifest_of(home)))
    assert now - rows
    assert _unstored(net, home, tmp_path, now - rows) == {}
    out = tmp_path / "out"
    restored = flud("restore", "--home", home, "--to", out)
    assert restored.returncode == 0, output(restored)
    assert compare_trees(src, out / "src") == []

    # fewer live nodes than k: a typed error, exit 2, one JSON object, no traceback
    for index in range(NODES):
        if net.node_alive(index) and sum(net.node_alive(i) for i in range(NODES)) > 3:
            net.stop(index)
    _small_files(src, rng, "fourth", 20)
    failed = flud("backup", src, "--home", home, "--json")
    assert failed.returncode == 2, output(failed)
    assert "Traceback" not in failed.stderr, output(failed)
    error = _json_of(failed)["error"]
    assert error["code"] and error["message"], error
    print(f"\n3 of 16 nodes up: {error}")
