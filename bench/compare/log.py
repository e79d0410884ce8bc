"""The runner's messages: on stderr, each prefixed and flushed at once."""

import sys


def log(msg):
    print("bench-compare: " + msg, file=sys.stderr, flush=True)
