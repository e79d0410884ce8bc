"""The fsync floor: a raw fsynced write with no server, the lower bound
under every synchronous write (Bagai et al.)."""

import json
import os
import subprocess

from .log import log
from .resources import LOAD_PAYLOAD
from .runner import RUN_SLACK_S, figures, median_of, settle


def run_fsync_floor(stoa_bin, servers, repeats, timing, base):
    """Bagai et al.'s lower bound: one synchronous writer writing 100 B into a
    preallocated file and fdatasyncing it, on the disk the servers' data
    dirs are on, with the servers idle; medians over the repeats."""
    runs = []
    for _ in range(repeats):
        settle(servers)
        out = os.path.join(base, "floor.json")
        argv = [stoa_bin, "bench", "--target", "file", "--dir", base, "--mix", "set=100",
                "--payload", str(LOAD_PAYLOAD), "--quiet", "--json", out,
                "--duration", str(timing[0]), "--warmup", str(timing[1])]
        p = subprocess.run(argv, capture_output=True, text=True, timeout=RUN_SLACK_S)
        if p.returncode != 0:
            raise RuntimeError("%s failed (%d): %s" % (" ".join(argv), p.returncode,
                                                       p.stderr.strip()))
        with open(out) as f:
            runs.append(figures(json.load(f)["results"][0]))
    floor = median_of(runs)
    log("raw fsynced write (floor): %.0f ops/s, p50 %.3f ms, p99 %.3f ms"
        % (floor["throughput_ops_s"], floor["p50"] / 1000.0, floor["p99"] / 1000.0))
    return floor
