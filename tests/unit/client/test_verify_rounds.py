"""`flud verify` says which round it ran, and --full reads every byte."""
import random

import blake3
import pytest
from twisted.internet import defer

from flud.client.extents import StreamHashes
from flud.client.segments import CHALLENGE_SPAN, challenges_for
from flud.client.verify import SPOT, WHOLE, challenge_index, describe_round, verify

SECRET = b"s" * 32
NODE = "ab" * 32


class OneShareNetwork:
    """Answers VERIFY over the bytes it holds (changed ones included)."""

    def __init__(self, data: bytearray):
        self.data = data

    def call(self, node_id, method, key, nonce, offset, length):
        assert method == "verify"
        return defer.succeed(blake3.blake3(nonce + bytes(self.data[offset:offset + length]))
                             .digest())


def synchronous(d):
    out = []
    d.addBoth(out.append)
    assert out, "did not finish"
    return out[0]


@pytest.fixture(params=["share", "stream"])
def share(request):
    """A bundle's share (challenges from its key) or an extent's stream
    (challenges with their nonces, made as its blocks went by)."""
    data = bytearray(random.Random(1).randbytes(5 * CHALLENGE_SPAN + 123))
    key = blake3.blake3(data).digest()
    if request.param == "share":
        challenges = challenges_for(SECRET, key, data)
    else:
        hashes = StreamHashes(SECRET, b"first block key" + bytes([3]), len(data))
        for i in range(0, len(data), 10_000):
            hashes.update(bytes(data[i:i + 10_000]))
        challenges = hashes.challenges()
    manifest = {"contents": {}, "bundles": {"b": {"shares": [[0, key.hex(), NODE]]}},
                "challenges": {key.hex(): challenges}}
    return data, key, challenges, manifest


def corrupt_outside_the_spot(data, challenges):
    offset, span = challenges[SPOT][0], challenges[SPOT][1]
    where = 0 if offset >= 1 else offset + span  # a byte the spot span does not cover
    assert not offset <= where < offset + span
    data[where] ^= 0xFF


def test_rounds_alternate_and_full_is_always_the_whole_share():
    assert challenge_index(0, 2, full=False) == WHOLE
    assert challenge_index(1, 2, full=False) == SPOT
    assert challenge_index(7, 2, full=False) == SPOT
    assert all(challenge_index(r, 2, full=True) == WHOLE for r in range(4))
    assert challenge_index(1, 1, full=False) == WHOLE  # a share with one challenge


def test_the_spot_round_misses_a_corruption_the_full_round_finds(share):
    data, key, challenges, manifest = share
    corrupt_outside_the_spot(data, challenges)
    network = OneShareNetwork(data)

    per_node, bad = synchronous(verify(network, SECRET, manifest, round_number=1))
    assert bad == [] and per_node[NODE]["confirmed"] == 1  # what a spot round cannot see

    per_node, bad = synchronous(verify(network, SECRET, manifest, round_number=1, full=True))
    assert bad == [(NODE, key.hex(), "corrupt")]
    assert per_node[NODE]["corrupt"] == 1


def test_the_description_says_what_was_read():
    spot = describe_round(SPOT)
    assert "spot check" in spot and "64 KiB" in spot and "--full" in spot
    whole = describe_round(WHOLE)
    assert "whole" in whole and "every byte" in whole



def test_the_command_prints_its_round_and_full_finds_what_the_spot_missed(tmp_path, capsys):
    """The command's own output, over an in-memory network: the round is
    named in the heading and the summary; --full leaves the rounds' turn."""
    import argparse
    import os

    from flud.client.backup.run import Backup
    from flud.client.progress import Progress
    from flud.cli.jobs import _verify
    from flud.memory import MemoryMonitor
    from flud.workers import CPUPool
    from tests.unit.client.fakes import make_world, run_until

    clock, home, network = make_world(tmp_path, nodes=10)
    os.makedirs(tmp_path / "src")
    (tmp_path / "src" / "big.bin").write_bytes(random.Random(2).randbytes(3 * 1024 * 1024))
    monitor = MemoryMonitor(clock=clock.seconds, rss_reader=lambda: 0)
    run_until(clock, Backup(clock, home, network, CPUPool(clock, inline=True), monitor,
                            Progress("backup", quiet=True), clock=clock.seconds)
              .run([str(tmp_path / "src")]))

    def run(full):
        args = argparse.Namespace(snapshot=None, sample=1.0, full=full)
        code = run_until(clock, _verify(clock, home, network, None, monitor, None, args))
        return code, capsys.readouterr().out

    code, out = run(full=False)
    assert code == 0 and "whole-share challenge" in out.splitlines()[0], out
    code, out = run(full=False)
    assert code == 0 and "spot check of a 64 KiB span" in out.splitlines()[0], out
    assert "--full" in out.splitlines()[-1], out
    code, out = run(full=True)
    assert code == 0 and "whole-share challenge" in out.splitlines()[0], out
    assert home.index.get_meta("verify_round", 0) == 2  # --full took no turn
