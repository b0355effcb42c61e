"""Pictures of a run or a sweep; matplotlib is imported only here, only when asked."""
import sys


def _pyplot():
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("--plot needs matplotlib: pip install -e '.[plot]'", file=sys.stderr)
        return None
    return plt


def plot_run(doc: dict, path: str) -> bool:
    return False


def plot_sweep(doc: dict, path: str) -> bool:
    return False
