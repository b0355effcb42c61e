"""Opening the client home a command names."""
import sys


def open_home(path: str):
    """The client home at path, or None once a one-line error is printed."""
    from flud.client.home import ClientHome, HomeError

    try:
        return ClientHome(path)
    except HomeError as err:
        print(f"error: {err}", file=sys.stderr)
        return None
