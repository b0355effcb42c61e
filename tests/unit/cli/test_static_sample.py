"""The client's static footprint is sampled with the job's code loaded
(flud/cli/jobs.py): a first segment or manifest must import nothing."""
import subprocess
import sys

from flud.cli.jobs import JOB_MODULES

FIRST_WORK = """
import sys
from flud.lean import defer_unused_imports
defer_unused_imports()
from flud.cli.jobs import load_job_code
load_job_code("backup")
before = set(sys.modules)
from flud.client.repository.segments import add_parity, prepare_primaries
from flud.coding import SegmentCoder
from flud.crypto import derive_key, open_sealed, seal
secret = bytes(32)
for data in (bytearray(b"x" * 100000), b"y" * 1000):
    add_parity(secret, SegmentCoder(4, 8), prepare_primaries(secret, SegmentCoder(4, 8), data))
open_sealed(derive_key(secret, "manifest"), seal(derive_key(secret, "manifest"), b"m"))
print(" ".join(sorted(set(sys.modules) - before)))
"""


def test_a_backup_imports_nothing_after_its_code_is_loaded():
    out = subprocess.run([sys.executable, "-c", FIRST_WORK], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == []


def test_every_job_has_its_code_listed():
    from flud.cli import jobs
    assert set(JOB_MODULES) == {"backup", "restore", "verify", "ls", "find", "diff", "forget",
                                "prune", "tag", "check", "adopt", "dump",
                                "stats"}
    for job in JOB_MODULES:
        jobs.load_job_code(job)
        assert all(name in sys.modules for name in JOB_MODULES[job])
