//! Models of the collectives' slot protocol: participants post by moving their slot's number
//! forward, wait (parking at once, so a lost wake-up is a deadlock loom reports) until everyone
//! joined, read each other's posts, and, when the collective shares buffers, wait again until
//! everyone is done. Each participant's post names its collective and rank, and every reader
//! checks the posts it reads: a post rewritten for a later collective while someone still
//! reads it (the parity scheme failing) shows as a wrong name.
//!
//! The breaking model adds a thread that breaks the communicator (as a shutdown does) while
//! the participants join: whatever the interleaving, both participants reach the same verdict,
//! run the collective's work only when the verdict is success, and return.

use std::sync::atomic::AtomicUsize;
use std::time::Duration;

use loom::thread::spawn;

use super::collective::Collective;
use super::communicator::{CpuCcl, Post, Posts};
use crate::channel::SpinPolicy;
use crate::object::{Error, Result};
use crate::sync::{Arc, explore, thread};

const PARK_AT_ONCE: SpinPolicy = SpinPolicy {
    budget: Duration::ZERO,
};

/// The name participant `rank` gives its post for collective `seq`.
fn param(seq: u64, rank: usize) -> i64 {
    (seq * 10) as i64 + rank as i64
}

/// Checks that `posts` are everyone's posts for collective `seq`.
fn check_posts(posts: &Posts, seq: u64) -> Result<()> {
    for (rank, post) in posts.iter().enumerate() {
        assert_eq!(
            post.param,
            param(seq, rank),
            "collective {seq}: rank {rank}'s post is another collective's"
        );
    }
    Ok(())
}

/// Participant `rank` of the whole session runs `rounds` collectives, alternating staged and
/// shared ones from `first_staged` on; returns each collective's verdict.
fn participant(
    ccl: &Arc<CpuCcl>,
    rank: usize,
    rounds: u64,
    first_staged: bool,
    works: &Arc<AtomicUsize>,
) -> thread::JoinHandle<Vec<Result<()>>> {
    let ccl = ccl.clone();
    let works = works.clone();
    spawn(move || {
        let (team, r) = ccl.team(rank, false);
        let team = team.clone();
        (1..=rounds)
            .map(|seq| {
                let staged = first_staged ^ (seq % 2 == 0);
                let post = Post::new(Collective::Barrier, param(seq, r), None, None);
                ccl.run(
                    &team,
                    r,
                    post,
                    staged,
                    |posts| check_posts(posts, seq),
                    |posts| {
                        check_posts(posts, seq).unwrap();
                        works.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    },
                )
            })
            .collect()
    })
}

/// Two participants run three collectives (the first and third use the same post places),
/// staged and shared alternately; every collective succeeds on both, and each ran its work.
fn collectives_in_a_row(first_staged: bool) {
    let ccl = Arc::new(CpuCcl::new(2, 1, None, PARK_AT_ONCE));
    let works = Arc::new(AtomicUsize::new(0));
    let a = participant(&ccl, 0, 3, first_staged, &works);
    let b = participant(&ccl, 1, 3, first_staged, &works);
    for verdicts in [a.join().unwrap(), b.join().unwrap()] {
        assert!(verdicts.iter().all(Result::is_ok), "{verdicts:?}");
    }
    assert_eq!(works.load(std::sync::atomic::Ordering::Relaxed), 6);
}

/// Two participants join one shared collective while a third thread breaks the communicator.
fn broken_while_joining() {
    let ccl = Arc::new(CpuCcl::new(2, 1, None, PARK_AT_ONCE));
    let works = Arc::new(AtomicUsize::new(0));
    let a = participant(&ccl, 0, 1, false, &works);
    let b = participant(&ccl, 1, 1, false, &works);
    ccl.abort(&Error::runtime("the session shut down"));
    let (a, b) = (a.join().unwrap(), b.join().unwrap());
    assert_eq!(
        a[0].is_ok(),
        b[0].is_ok(),
        "different verdicts: {a:?} {b:?}"
    );
    let works = works.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(works, if a[0].is_ok() { 2 } else { 0 });
    // Broken for good: the next collective fails at once, without waiting for anyone.
    let (team, rank) = ccl.team(0, false);
    let post = Post::new(Collective::Barrier, 0, None, None);
    assert!(
        ccl.run(team, rank, post, false, |_| Ok(()), |_| {})
            .is_err()
    );
}

#[test]
fn staged_then_shared_collectives_reuse_posts_only_after_everyone_read_them() {
    explore(
        "ccl: staged, shared, staged collectives, two participants",
        Some(2),
        || collectives_in_a_row(true),
    );
}

#[test]
fn shared_then_staged_collectives_reuse_posts_only_after_everyone_read_them() {
    explore(
        "ccl: shared, staged, shared collectives, two participants",
        Some(2),
        || collectives_in_a_row(false),
    );
}

#[test]
fn a_communicator_broken_while_participants_join_gives_one_verdict() {
    explore(
        "ccl: communicator broken while two participants join",
        Some(3),
        broken_while_joining,
    );
}
