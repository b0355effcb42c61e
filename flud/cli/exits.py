"""The exit codes of every `flud` command, in one place.

A node process started by `flud node run` also exits 3 when it cannot
listen (flud/node/process.py: it runs below the CLI and cannot import it)."""

EXIT_OK = 0
# The job ran, but left something out: skipped files, refused paths, shares
# found bad. For the testnet commands: not done (already running, did not
# start, not every node alive, no testnet there).
EXIT_SKIPPED = 1
EXIT_NOT_DONE = 1
# `flud find` found nothing (as grep says it).
EXIT_NO_MATCH = 1
# The job could not be done; the message says why.
EXIT_ERROR = 2
# Ctrl-C: the shell's code for a death by SIGINT.
EXIT_INTERRUPTED = 130
# Whoever read the output stopped reading (as in `flud ls | head`): the
# shell's code for a death by SIGPIPE, without a trace.
EXIT_BROKEN_PIPE = 128 + 13


class UserError(Exception):
    """Ends a client job with a message that says what to do (EXIT_ERROR)."""
