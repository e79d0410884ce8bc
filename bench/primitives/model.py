"""The model of "The Cost of Consensus" (section III), per cell.

A lock's acquire latency is the round trips its calls need, each a client-
server round trip c, plus for a write the consensus round: the leader
waits for the fastest majority of the ensemble (eq. 3, the largest round
trip among the fastest ceil((n+1)/2) members, the leader's own 0
included), plus, under contention, the M/M/1 waiting time (eqs. 4-5).

    write  W = c + q + w0     q: eq. 3 over the emulated server RTTs;
                              w0: a write's round trip with no delay
                              (fsync, processing), measured once per run
    read   R = c + r0         r0: a read's, likewise

Per primitive, the uncontended acquire (T0, the paper's T_pre + T_post)
and the hand-off H (from the holder's release to the next holder's grant,
when someone waits):

    tas          T0 = W       H = W + W          notified once the delete
                                                 commits, then a create
    tas-async    T0 = 2W      H = 2W + q + w0 + p/2   a create every p ms
                                                 arrives p/2 after the
                                                 delete commits; the recipe
                                                 returns once the creates
                                                 still in flight are
                                                 answered, each a write
                                                 too (+W)
    queue        T0 = W + R   H = W + R          notified, then the listing
    queue-async  T0 = W       H = W + R          create and listing at once
    server       T0 = W       H = W              the release grants the next
                                                 ticket in its own
                                                 transaction; the waiter's
                                                 watch event is the grant

The lock is busy for a hold plus a hand-off per grant: mean service time
S = hold + H, mu = 1/S. Arrivals: N clients, each thinking Z (mean) after
its release, so lambda = N / (Z + T + hold + W), where T = T0 + Wq is the
acquire latency and Wq = rho / (mu - lambda) the M/M/1 wait in queue (eq.
5's W less the service itself); solved for lambda by bisection (the loop
is closed, so lambda < mu always). The prediction is T.

The paper's M/M/1 takes the arrivals as an infinite Poisson source. Our N
clients are a finite one (at most N - 1 wait), so predict() also gives
the finite-source queue beside it (M/M/1//N, the machine-repairman model:
each client away from the lock for Z + release on average, the lock
serving S): its wait in queue is L / X - S with L the mean number at the
lock and X its throughput. Same T0 and S; only the queue differs.
"""

import math

PRIMITIVES = ["tas", "tas-async", "queue", "queue-async", "server"]
CLIENT_SIDE = ["tas", "tas-async", "queue", "queue-async"]


def star_rtts(n, server_rtt_ms):
    """The emulated server-server round trips: member 0 is the hub of a
    star of WAN links (tests/e2e/regions.py), so 0<->i is one link, i<->j
    (i, j >= 1) two."""
    m = [[0.0] * n for _ in range(n)]
    for i in range(n):
        for j in range(n):
            if i != j:
                m[i][j] = server_rtt_ms * (1 if 0 in (i, j) else 2)
    return m


def consensus_ms(rtts, leader):
    """Eq. 3: the largest round trip among the fastest majority, the leader
    (0 ms) counted in it."""
    n = len(rtts)
    if n <= 1:
        return 0.0
    majority = n // 2 + 1
    fastest = sorted(rtts[leader][j] for j in range(n) if j != leader)
    return fastest[majority - 2]


def round_trips(primitive, c, q, w0, r0, poll_ms):
    """(T0, H, release) in ms for one primitive."""
    W = c + q + w0
    R = c + r0
    if primitive == "tas":
        return W, 2 * W, W
    if primitive == "tas-async":
        return 2 * W, 2 * W + q + w0 + poll_ms / 2.0, W
    if primitive == "queue":
        return W + R, W + R, W
    if primitive == "queue-async":
        return W, W + R, W
    if primitive == "server":
        return W, W, W
    raise ValueError("no model for primitive %r" % primitive)


def mm1_wait_ms(lam_per_ms, service_ms):
    """Eq. 5 less the service: the M/M/1 time in queue, rho / (mu - lambda)."""
    mu = 1.0 / service_ms
    if lam_per_ms >= mu:
        return math.inf
    rho = lam_per_ms / mu
    return rho / (mu - lam_per_ms)


def predict(primitive, clients, think_ms, hold_ms, c, q, w0, r0, poll_ms=5.0):
    """The model's acquire latency (ms) and its parts for one cell."""
    t0, h, release = round_trips(primitive, c, q, w0, r0, poll_ms)
    service = hold_ms + h

    def latency(lam):
        return t0 + mm1_wait_ms(lam, service)

    # lambda = N / (Z + T(lambda) + hold + release): the left side grows
    # with lambda, the right side falls; bisect on [0, min(mu, open bound)).
    hi = min(1.0 / service, clients / (think_ms + t0 + hold_ms + release)) if clients else 0.0
    lo = 0.0
    for _ in range(100):  # bounded; converges to float precision long before
        mid = (lo + hi) / 2.0
        t = latency(mid)
        rhs = clients / (think_ms + t + hold_ms + release) if math.isfinite(t) else 0.0
        if mid < rhs:
            lo = mid
        else:
            hi = mid
    lam = lo
    wq = mm1_wait_ms(lam, service)
    wq_finite = finite_source_wait_ms(clients, think_ms + release, service)
    return {
        "finite_ms": t0 + wq_finite,
        "finite_wait_ms": wq_finite,
        "latency_ms": t0 + wq,
        "t0_ms": t0,
        "handoff_ms": h,
        "service_ms": service,
        "wait_ms": wq,
        "rho": lam * service,
        "lambda_per_s": lam * 1e3,
        "q_ms": q,
    }


def finite_source_wait_ms(clients, away_ms, service_ms):
    """M/M/1//N: N clients, each away (mean away_ms) between its visits to
    one server of mean service service_ms; the mean wait in queue (ms)."""
    if clients <= 0:
        return 0.0
    r = service_ms / away_ms if away_ms > 0 else math.inf
    if not math.isfinite(r):
        return (clients - 1) * service_ms
    # p_k proportional to N! / (N - k)! * r^k, k = 0..N
    weights = [1.0]
    for k in range(1, clients + 1):
        weights.append(weights[-1] * (clients - k + 1) * r)
    total = sum(weights)
    p = [w / total for w in weights]
    busy = 1.0 - p[0]
    if busy <= 0:
        return 0.0
    mean_at_lock = sum(k * pk for k, pk in enumerate(p))
    throughput = busy / service_ms
    return max(0.0, mean_at_lock / throughput - service_ms)
