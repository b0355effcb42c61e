import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def test_core_modules_defer_heavy_imports():
    # An idle node must stay small: zfec, psutil and matplotlib load only when used.
    code = (
        "import sys, flud.keys, flud.crypto, flud.coding, flud.memory, flud.workers\n"
        "print(sorted(m for m in ('zfec', 'psutil', 'matplotlib') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
