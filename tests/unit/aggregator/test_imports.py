"""The aggregator stays pure: nothing of flud but flud.storage, no reactor, no coder or hash of its own."""

import subprocess
import sys
from pathlib import Path

FORBIDDEN = ("twisted", "zfec", "blake3")
MODULES = ("flud.aggregator.aggregator", "flud.aggregator.policy", "flud.aggregator.tarball",
           "flud.aggregator.bundle", "flud.aggregator.placement", "flud.aggregator.records")
# of flud, only the (empty) package itself and the two pure rooms
PURE_ROOMS = ("flud.aggregator", "flud.storage")
TIMEOUT_SECONDS = 60
REPO_ROOT = Path(__file__).resolve().parents[3]


def test_aggregator_imports_nothing_forbidden():
    script = (f"import sys\n"
              f"for name in {MODULES!r}: __import__(name)\n"
              f"print(' '.join(sorted(sys.modules)))")
    loaded = subprocess.run([sys.executable, "-c", script], check=True, cwd=REPO_ROOT,
                            capture_output=True, text=True,
                            timeout=TIMEOUT_SECONDS).stdout.split()
    assert not set(FORBIDDEN) & {name.split(".")[0] for name in loaded}
    of_flud = {name for name in loaded if name == "flud" or name.startswith("flud.")}
    assert "flud.aggregator.aggregator" in of_flud
    assert not {name for name in of_flud if name != "flud"
                and not any(name == room or name.startswith(room + ".") for room in PURE_ROOMS)}
