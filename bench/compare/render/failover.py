"""The report's section on failover: a leader killed under load."""

import statistics

from ..failover import ERROR_PAUSE_S, VALUE, fmt_s, summary
from ..systems import SYSTEMS, long, short
from .text import num, ratio

# The ZooKeeper the ratios are against (the newest release), where present.
RATIO_TO = "zookeeper-3.9"


def _rate(rounds, lo, hi, fctx):
    """Median over rounds of the mean writes/s in [lo, hi) s from the kill."""
    start, bin_s = fctx["window_s"][0], fctx["bin_s"]
    i, j = int(round((lo - start) / bin_s)), int(round((hi - start) / bin_s))
    per_round = [statistics.mean(r["bins"][i:j]) for r in rounds if r["bins"][i:j]]
    return statistics.median(per_round) if per_round else float("nan")


def failover_report(L, failover, ctx):
    if not failover or not failover.get("systems"):
        return
    fctx, res = failover["context"], failover["systems"]
    systems = [k for k in SYSTEMS if k in res]
    sums = {k: summary(res[k]["rounds"]) for k in systems}
    base = RATIO_TO if sums.get(RATIO_TO, {}).get("rounds") else None
    clients = 3 * fctx["clients_per_member"]
    L.append("## Failover: the leader killed under load\n")
    L.append("What clients feel when the leader of a 3-member ensemble dies (`kill -9`). Each "
             "round starts a fresh ensemble of each system, set up as in the section above "
             "(the systems in an order rotating per round), and attaches %d closed-loop "
             "clients, %d per member; a client's host list starts at its member and then names "
             "the other two in order (no randomization). A client alternates a write of %d B "
             "to its own key and a read of that key, one call at a time (after a failed call "
             "it pauses %.0f ms). After %.0f s of load the leader (srvr's `Mode`; etcd's "
             "maintenance status) gets SIGKILL. **Write recovery**: per client, the seconds "
             "from the kill to the acknowledgement of its first write that *started* after "
             "the kill; **read recovery**: the same for a read (ZooKeeper and Stoa: a "
             "getData, answered by the member the client is connected to; etcd: a "
             "linearizable range). p50 and max are over every client of every round (%d per "
             "round); the leader's own clients must reconnect elsewhere, the others see what "
             "their member does while it has no leader. A round ends once every client has "
             "both (but not before %.0f s after the kill, the end of the plot) or %.0f s "
             "after the kill; a client still not through then shows as `> %.0f`." % (
                 clients, fctx["clients_per_member"], len(VALUE), ERROR_PAUSE_S * 1000,
                 fctx["load_before_s"], clients, fctx["window_s"][1], fctx["cap_s"],
                 fctx["cap_s"]))
    L.append("")
    L.append("- ZooKeeper and Stoa: kazoo %s (the e2e tests' client) configured as an "
             "application would: `KazooClient(timeout=%.1f, randomize_hosts=False, "
             "connection_retry=KazooRetry(max_tries=-1, delay=0.05, max_delay=1.0))`, i.e. "
             "%.0f s sessions and reconnects 50 ms apart, doubling up to 1 s. A call is waited "
             "for %.0f s at most; kazoo keeps one sent while disconnected queued, and its "
             "answer counts when it comes. **Session expiries**: kazoo's `LOST` state after "
             "the kill (the client came back after the servers had expired its session, and "
             "got a new one; its ephemerals and watches would be gone)."
             % (fctx.get("kazoo") or "?", fctx["session_timeout_s"],
                fctx["session_timeout_s"], fctx["attempt_timeout_s"]))
    if any(k.startswith("etcd") for k in systems):
        L.append("- etcd: its HTTP JSON gateway (`/v3/kv/put`, `/v3/kv/range`), a connection "
                 "per call with a %.0f s timeout; after an error or a timeout the client moves "
                 "to the next endpoint. A put that reaches a member while it has no leader "
                 "waits (etcd drops the proposal and answers only at its own request "
                 "timeout), so clients whose call was in flight at the election show that "
                 "%.0f s; the client has no session (no lease), so no expiries (a dash)."
                 % (fctx["attempt_timeout_s"], fctx["attempt_timeout_s"]))
    L.append("- The plot: the acknowledged writes of all %d clients in %.0f ms bins from %.0f s "
             "before the kill to %.0f s after, each bin the median over the rounds. The "
             "clients are Python threads sharing the 2 cores with the three members, so the "
             "level (hundreds to a few thousand writes/s) is the clients' and says little "
             "about the servers' peak (the ensemble table above does): what it shows is when writes "
             "stop and when they come back.\n"
             % (clients, fctx["bin_s"] * 1000, -fctx["window_s"][0], fctx["window_s"][1]))
    if ctx.get("quick") or fctx["rounds"] == 1:
        L.append("(%d round: a smoke test; the p50 and max of 6 clients of one kill.)\n"
                 % fctx["rounds"])
    cols = ["system", "rounds", "write recovery p50, s", "write max, s", "read recovery p50, s",
            "read max, s", "session expiries", "writes/s before / 1-5 s after the kill",
            "killed → new leader"]
    ratio_cols = [("write_p50", "write p50"), ("write_max", "write max"),
                  ("read_p50", "read p50"), ("read_max", "read max")]
    if base:
        cols += ["%s / %s" % (what, short(base)) for _, what in ratio_cols]
    L.append("| " + " | ".join(cols) + " |")
    L.append("|---|" + "---:|" * 7 + "---|" + "---:|" * (len(ratio_cols) if base else 0))
    for k in systems:
        s, rounds = sums[k], res[k]["rounds"]
        row = [long(k), "%d" % s["rounds"]]
        row += [fmt_s(s[key]) for key in ("write_p50", "write_max", "read_p50", "read_max")]
        row.append("–" if s["expiries"] is None else "%d" % s["expiries"])
        row.append("%s / %s" % (num(_rate(rounds, fctx["window_s"][0], 0.0, fctx), "%.0f"),
                                num(_rate(rounds, 1.0, fctx["window_s"][1], fctx), "%.0f")))
        row.append(", ".join("m%d → m%s" % (r["leader"], r["leader_after"] or "?")
                             for r in rounds) or "–")
        if base:
            row += [num(ratio(s[key], sums[base][key]), "%.2f") for key, _ in ratio_cols]
        L.append("| " + " | ".join(row) + " |")
    L.append("")
    if base:
        L.append("Ratios: the system's time divided by %s's (below 1: it recovers faster). "
                 "Times on this machine move with the load of the moment; the ratios less so.\n"
                 % long(base))
    errors = ["%s: %s" % (long(k), "; ".join(res[k]["errors"])) for k in systems
              if res[k]["errors"]]
    if errors:
        L.append("Rounds that failed (left out of the figures): %s.\n" % " ".join(errors))
    for png, title in ctx.get("failover_plots", []):
        L.append("![%s](bench/%s)\n" % (title, png))
