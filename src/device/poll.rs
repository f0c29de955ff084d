//! Waiting for a device without blocking in its driver. Work a device runs may wait forever for
//! another thread (an NCCL collective or a communicator a peer never joins), and a thread
//! blocked in the driver could never give up on it. The one idea: such a wait polls the device,
//! pausing between polls (a spin, then yields, then sleeps of bounded back-off), and runs a
//! check between polls that may give up; a thread whose waits are watched gets that check made
//! anew for each wait that begins.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use crate::object::Result;

/// The check of one wait: called between polls, it gives up with its error.
pub(crate) type Check = Box<dyn FnMut() -> Result<()>>;

/// Makes the check for a wait beginning now, or `None` when the thread's waits may block.
pub(crate) type CheckMaker = Rc<dyn Fn() -> Option<Check>>;

thread_local! {
    static CHECK_MAKER: RefCell<Option<CheckMaker>> = const { RefCell::new(None) };
}

/// Makes every wait of the calling thread for its device that would block in the driver (a
/// stream or event sync, the sync after a small copy) poll instead, with the check
/// `make_check` makes when the wait begins, whenever it makes one: how a session worker with
/// NCCL communicators stays able to give up on work that waits for a peer, in waits of any kind.
pub(crate) fn watch_this_thread(make_check: CheckMaker) {
    CHECK_MAKER.with(|m| *m.borrow_mut() = Some(make_check));
}

/// The check for a wait of the calling thread beginning now, if its waits are watched (see
/// [`watch_this_thread`]).
pub(crate) fn this_threads_check() -> Option<Check> {
    // A thread's last destructors may still wait: by then there is no check maker.
    let make_check = CHECK_MAKER
        .try_with(|m| m.borrow().clone())
        .ok()
        .flatten()?;
    make_check()
}

/// How many polls of a polling wait only spin, and until which one they yield the CPU; later
/// polls sleep, from [`FIRST_SLEEP`] doubling up to [`LONGEST_SLEEP`]. A collective that
/// finishes within microseconds is seen at once; a long one costs the machine little.
const SPIN_POLLS: u32 = 16;
const YIELD_POLLS: u32 = 64;
const FIRST_SLEEP: Duration = Duration::from_micros(10);
const LONGEST_SLEEP: Duration = Duration::from_millis(1);

/// The pause between two polls of a polling wait: a short spin, then yields, then sleeps with a
/// bounded back-off.
#[derive(Debug, Default)]
struct Backoff {
    polls: u32,
    sleep: Option<Duration>,
}

impl Backoff {
    /// Pauses before the next poll; returns how long it slept (zero while it spins or yields).
    fn pause(&mut self) -> Duration {
        self.polls = self.polls.saturating_add(1);
        if self.polls <= SPIN_POLLS {
            std::hint::spin_loop();
            return Duration::ZERO;
        }
        if self.polls <= YIELD_POLLS {
            std::thread::yield_now();
            return Duration::ZERO;
        }
        let sleep = self
            .sleep
            .map_or(FIRST_SLEEP, |last| (last * 2).min(LONGEST_SLEEP));
        self.sleep = Some(sleep);
        std::thread::sleep(sleep);
        sleep
    }
}

/// Waits, without blocking in the driver, until `passed` says the device passed a point:
/// between polls it calls `check`, and gives up with `check`'s error (the device work is left
/// to whoever can end it, e.g. by aborting a communicator). A failed `passed` ends the wait
/// with its error. This is how a thread whose device work may wait forever for other threads
/// (an NCCL collective a peer never joins) stays able to give up (PyTorch's NCCL watchdog does
/// the same).
pub(crate) fn poll_until(
    mut passed: impl FnMut() -> Result<bool>,
    check: &mut dyn FnMut() -> Result<()>,
) -> Result<()> {
    let mut backoff = Backoff::default();
    // Not `channel::wait`: nothing wakes a waiter when a device passes a point, so this polls.
    loop {
        if passed()? {
            return Ok(());
        }
        check()?;
        backoff.pause();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object::{Error, ErrorKind};

    /// A watched thread's waits each get a check of their own, made when the wait begins, and
    /// one that gives up ends the wait; other threads' waits are not watched.
    #[test]
    fn a_watched_threads_waits_each_get_a_check_and_other_threads_none() {
        assert!(this_threads_check().is_none());
        let made = Rc::new(std::cell::Cell::new(0));
        let counter = made.clone();
        watch_this_thread(Rc::new(move || {
            counter.set(counter.get() + 1);
            let stop = || {
                Err(Error::new(
                    ErrorKind::SessionClosed,
                    "the session was shut down",
                ))
            };
            Some(Box::new(stop) as Check)
        }));
        let mut check = this_threads_check().expect("the thread is watched");
        assert_eq!(made.get(), 1);
        let error = poll_until(|| Ok(false), &mut *check).unwrap_err();
        assert_eq!(error.kind, ErrorKind::SessionClosed);
        assert!(this_threads_check().is_some());
        assert_eq!(made.get(), 2);
        std::thread::spawn(|| assert!(this_threads_check().is_none()))
            .join()
            .unwrap();
    }

    #[test]
    fn a_polling_wait_returns_once_the_point_is_passed_checking_in_between() {
        let (mut queries, mut checks) = (0, 0);
        poll_until(
            || {
                queries += 1;
                Ok(queries == 4)
            },
            &mut || {
                checks += 1;
                Ok(())
            },
        )
        .unwrap();
        assert_eq!((queries, checks), (4, 3), "a check between two polls");

        // Passed at once: the check is never called (the fast path costs one query).
        poll_until(|| Ok(true), &mut || panic!("not called")).unwrap();
    }

    #[test]
    fn a_polling_wait_gives_up_with_the_checks_error_or_a_failed_query() {
        let mut checks = 0;
        let error = poll_until(|| Ok(false), &mut || {
            checks += 1;
            match checks {
                5 => Err(Error::runtime("worker 1: the communicator failed")),
                _ => Ok(()),
            }
        })
        .unwrap_err();
        assert_eq!(
            (error.kind, error.message.as_str(), checks),
            (ErrorKind::Runtime, "worker 1: the communicator failed", 5)
        );

        let error = poll_until(
            || Err(Error::runtime("CUDA: querying an event failed: ...")),
            &mut || panic!("not called"),
        )
        .unwrap_err();
        assert_eq!(error.message, "CUDA: querying an event failed: ...");
    }

    #[test]
    fn the_backoff_spins_then_yields_then_sleeps_at_most_a_millisecond() {
        let mut backoff = Backoff::default();
        for poll in 1..=YIELD_POLLS {
            assert_eq!(
                backoff.pause(),
                Duration::ZERO,
                "poll {poll} spins or yields"
            );
        }
        let sleeps: Vec<Duration> = (0..10).map(|_| backoff.pause()).collect();
        assert_eq!(sleeps[0], FIRST_SLEEP);
        assert!(sleeps.windows(2).all(|w| w[0] <= w[1]), "{sleeps:?}");
        assert_eq!(sleeps[9], LONGEST_SLEEP, "{sleeps:?}");
        assert!(sleeps.iter().all(|&s| s <= LONGEST_SLEEP), "{sleeps:?}");
    }

    #[test]
    fn a_long_polling_wait_polls_a_bounded_number_of_times() {
        // 30 ms of a point that never passes, then the check gives up: with the back-off that
        // is some hundred polls, not the millions a spinning wait would make.
        let start = std::time::Instant::now();
        let mut queries = 0u32;
        let error = poll_until(
            || {
                queries += 1;
                Ok(false)
            },
            &mut || match start.elapsed() >= Duration::from_millis(30) {
                true => Err(Error::runtime("given up")),
                false => Ok(()),
            },
        )
        .unwrap_err();
        assert_eq!(error.message, "given up");
        // (Fewer on a busy machine, where a yield may take the whole 30 ms.)
        assert!(queries < YIELD_POLLS + 200, "{queries} polls");
    }
}
