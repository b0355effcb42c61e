"""The aggregator stays pure: no flud, no reactor, no coder or hash of its own."""

import subprocess
import sys
from pathlib import Path

FORBIDDEN = ("flud", "twisted", "zfec", "blake3")
MODULES = ("aggregator.aggregator", "aggregator.policy", "aggregator.tarball",
           "aggregator.bundle", "aggregator.placement", "aggregator.records")
TIMEOUT_SECONDS = 60
REPO_ROOT = Path(__file__).resolve().parents[3]


def test_aggregator_imports_nothing_forbidden():
    script = (f"import sys\n"
              f"for name in {MODULES!r}: __import__(name)\n"
              f"print(' '.join(sorted({{m.split('.')[0] for m in sys.modules}})))")
    loaded = subprocess.run([sys.executable, "-c", script], check=True, cwd=REPO_ROOT,
                            capture_output=True, text=True,
                            timeout=TIMEOUT_SECONDS).stdout.split()
    assert not set(FORBIDDEN) & set(loaded)
