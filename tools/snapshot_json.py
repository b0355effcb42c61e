"""Print a snapshot, read from the nodes with the home's key, as one JSON
object in the version-1 manifest's shape (entries, contents, bundles): what
the tests and tools that inspect where things went read.

    python tools/snapshot_json.py --home H [--snapshot N]

Memory follows the tree (it is the whole listing): a tool, not a command."""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from twisted.internet import defer  # noqa: E402

from flud.cli.home import open_home  # noqa: E402
from flud.cli.runner import run_reactor  # noqa: E402


@defer.inlineCallbacks
def _dump(reactor, home, snapshot, out):
    from flud.client.context import JobContext
    from flud.client.network import Network
    from flud.client.progress import Progress
    from tools.flat_snapshot import flatten
    from flud.client.repository.snapshot_lookup import find_snapshot
    from flud.coding import SegmentCoder
    from flud.memory import MemoryMonitor
    from flud.workers import CPUPool

    k, n = home.config["k"], home.config["n"]
    network = Network(reactor, home.path, home.bootstrap())
    pool = CPUPool(reactor, size=2)
    try:
        yield network.discover()
        ctx = JobContext(reactor, home, network, pool, MemoryMonitor(),
                         Progress("read", quiet=True), SegmentCoder(k, n))
        found = yield find_snapshot(ctx, snapshot)
        try:
            manifest = found.manifest
            if manifest is None:
                manifest = yield flatten(found.repo, found.record, k, n)
                manifest["record"] = found.record_id
        finally:
            found.close()
        manifest.pop("challenges", None)
        out.append(manifest)
    finally:
        network.close()
        pool.stop()
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", required=True)
    parser.add_argument("--snapshot", type=int)
    args = parser.parse_args()
    home = open_home(args.home)
    if home is None:
        return 1
    out = []
    try:
        code = run_reactor(lambda reactor: _dump(reactor, home, args.snapshot, out))
    finally:
        home.close()
    if out:
        print(json.dumps(out[0]))
    return code


if __name__ == "__main__":
    sys.exit(main())
