use super::*;

const SEEDS: u64 = 200;

fn config(scheme: Scheme, partitions: usize, reconnect_percent: u64, seed: u64) -> Config {
    Config {
        scheme,
        partitions,
        keys: 2 * partitions,
        sessions: 4,
        calls_per_session: 40,
        write_percent: 30,
        multi_percent: 20,
        new_leader_percent: 3,
        reconnect_percent,
        seed,
    }
}

/// The seeds (of `SEEDS`, at two and three partitions) whose history
/// fails `check`, with the first failure.
fn failures(
    scheme: Scheme,
    reconnect_percent: u64,
    check: impl Fn(&History) -> Result<(), String>,
) -> (usize, Option<String>) {
    let mut failed = 0;
    let mut first = None;
    for partitions in [2, 3] {
        for seed in 0..SEEDS {
            let run = run(&config(scheme, partitions, reconnect_percent, seed));
            if let Err(why) = check(&run.history) {
                failed += 1;
                first.get_or_insert(format!("P={partitions} seed {seed}: {why}"));
            }
        }
    }
    (failed, first)
}

fn sequential(history: &History) -> Result<(), String> {
    history
        .sequentially_consistent()
        .map_err(|cycle| format!("{:?}", cycle.0))
}

fn causal(history: &History) -> Result<(), String> {
    (history.causally_consistent())
        .map_err(|(session, cycle)| format!("session {session}: {:?}", cycle.0))
}

#[test]
fn the_one_order_is_sequentially_consistent_across_reconnects_and_never_makes_a_read_wait() {
    assert_eq!(failures(Scheme::OneOrder, 10, sequential), (0, None));
    for seed in 0..20 {
        let figures = run(&config(Scheme::OneOrder, 3, 10, seed)).figures;
        assert_eq!(figures.reads_waited, 0, "seed {seed}");
        assert!(
            figures.reconnects > 0 && figures.writes > 0,
            "seed {seed}: {figures:?}"
        );
    }
}

#[test]
fn closed_watermarks_are_sequentially_consistent_across_reconnects() {
    assert_eq!(failures(Scheme::Watermarks, 10, sequential), (0, None));
}

/// Some seed's history fails `check` (`what` it shows), and the first is
/// printed.
fn some_fail(
    scheme: Scheme,
    reconnect_percent: u64,
    check: impl Fn(&History) -> Result<(), String>,
    what: &str,
) {
    let (failed, first) = failures(scheme, reconnect_percent, check);
    assert!(failed > 0, "no seed showed {what}");
    eprintln!(
        "{}: {what} in {failed} of {} runs; first: {}",
        scheme.name(),
        2 * SEEDS,
        first.unwrap()
    );
}

#[test]
fn vector_stamps_are_causal_but_two_sessions_can_see_independent_writes_in_opposite_orders() {
    assert_eq!(failures(Scheme::Vectors, 0, causal), (0, None));
    some_fail(Scheme::Vectors, 0, sequential, "no one order");
}

#[test]
fn vector_stamps_lose_what_a_session_saw_when_it_reconnects_with_one_number() {
    some_fail(
        Scheme::Vectors,
        10,
        causal,
        "a read going back after a reconnect",
    );
}

#[test]
fn unwaited_reads_are_not_even_causal() {
    // The checks can fail: reads served at once on partitions that apply
    // independently show a ready node before its data.
    some_fail(Scheme::Unwaited, 0, causal, "causality lost");
}

#[test]
fn partitions_that_apply_alone_hold_their_parts_for_less_than_the_one_order() {
    let per_part = |scheme| {
        let (mut applies, mut steps) = (0, 0);
        for seed in 0..40 {
            let figures = run(&config(scheme, 3, 0, seed)).figures;
            applies += figures.applies;
            steps += figures.apply_wait_steps;
        }
        steps as f64 / applies as f64
    };
    let one_order = per_part(Scheme::OneOrder);
    let watermarks = per_part(Scheme::Watermarks);
    assert!(one_order > 1.5 * watermarks, "{one_order} {watermarks}");
}

#[test]
fn under_watermarks_events_wait_for_every_partition_to_close_their_zxid() {
    let (mut applies, mut events, mut steps) = (0, 0, 0);
    for seed in 0..20 {
        let figures = run(&config(Scheme::Watermarks, 3, 0, seed)).figures;
        assert!(
            figures.events <= figures.applies,
            "seed {seed}: {figures:?}"
        );
        applies += figures.applies;
        events += figures.events;
        steps += figures.event_wait_steps;
    }
    assert!(
        events > applies / 2,
        "most events went out: {events} of {applies}"
    );
    assert!(
        steps > events,
        "some waited: {steps} steps over {events} events"
    );
    let one_order = run(&config(Scheme::OneOrder, 3, 0, 1)).figures;
    assert_eq!((one_order.events, one_order.event_wait_steps), (0, 0));
}

#[test]
fn a_seed_replays() {
    for scheme in Scheme::ALL {
        let a = run(&config(scheme, 3, 10, 7));
        let b = run(&config(scheme, 3, 10, 7));
        assert_eq!(a.figures, b.figures);
        assert_eq!(a.history.sessions, b.history.sessions);
    }
}
