//! When a wait gives up, and how long each kind of wait lasts when its session sets no bound.
//!
//! The one idea: a deadline is made once, where a wait begins, from the session's timeout (none:
//! no bound) or from the default below for that kind of wait, and is passed down unchanged, so
//! every layer under one wait gives up at the same instant and "no deadline" means one thing.
//! A timeout crosses a boundary (the C API, a worker's command line, the wire) as whole
//! milliseconds, where 0 means none ([`timeout_ms`], [`timeout_from_ms`]).

use std::time::Duration;

use crate::object::{Error, Result};
use crate::sync::time::Instant;

/// How long a node has to join a session whose controller sets no timeout.
pub(crate) const NODE_JOIN: Duration = Duration::from_secs(120);
/// How long a node tries to reach its controller.
pub(crate) const NODE_CONNECT: Duration = Duration::from_secs(60);
/// How long a peer has for each message of the handshake that joins a node to a session.
pub(crate) const HANDSHAKE_STEP: Duration = Duration::from_secs(5);
/// How long a silent node, or controller, counts as alive unless the session says otherwise.
pub(crate) const HEARTBEAT: Duration = Duration::from_secs(2);
/// How long a wait inside Gloo lasts at most in a session without a timeout (Gloo has no
/// unbounded wait).
pub(crate) const GLOO_WITHOUT_TIMEOUT: Duration = Duration::from_secs(600);
/// How long worker processes and nodes have to stop at shutdown, together, in a session
/// without a timeout; those still running then are ended.
pub(crate) const STOP_GRACE: Duration = Duration::from_secs(10);

/// When a wait gives up: at an instant, or never.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Deadline(Option<Instant>);

impl Deadline {
    /// A wait that lasts as long as it takes.
    pub const NEVER: Deadline = Deadline(None);

    pub fn at(instant: Instant) -> Deadline {
        Deadline(Some(instant))
    }

    /// `timeout` from now; never without one.
    pub fn after(timeout: Option<Duration>) -> Deadline {
        Deadline(timeout.map(|t| Instant::now() + t))
    }

    /// A deadline that has passed already: a wait checks once and gives up.
    pub fn now() -> Deadline {
        Deadline::at(Instant::now())
    }

    pub fn is_never(self) -> bool {
        self.0.is_none()
    }

    /// Whether the deadline has passed.
    pub fn passed(self) -> bool {
        self.0.is_some_and(|at| Instant::now() >= at)
    }

    /// The time left (zero once passed); `None` for a wait without a deadline.
    pub fn remaining(self) -> Option<Duration> {
        self.0.map(|at| at - Instant::now())
    }

    /// The instant of this deadline, or `fallback` for a wait that has none.
    pub fn or_at(self, fallback: Instant) -> Instant {
        self.0.unwrap_or(fallback)
    }
}

/// `timeout` as whole milliseconds, 0 for none (a bound under a millisecond counts as one).
pub(crate) fn timeout_ms(timeout: Option<Duration>) -> u64 {
    timeout.map_or(0, |t| {
        u64::try_from(t.as_millis()).unwrap_or(u64::MAX).max(1)
    })
}

/// The timeout of `ms` milliseconds, none for 0.
pub(crate) fn timeout_from_ms(ms: u64) -> Option<Duration> {
    (ms > 0).then(|| Duration::from_millis(ms))
}

/// [`timeout_from_ms`] of a caller's signed number `what`: a negative one is a `ValueError`.
pub(crate) fn timeout_from_signed_ms(ms: i64, what: &str) -> Result<Option<Duration>> {
    u64::try_from(ms)
        .map(timeout_from_ms)
        .map_err(|_| Error::value(format!("{what} is negative ({ms})")))
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_deadline_passes_once_its_instant_is_reached_and_never_never_does() {
        assert!(!Deadline::NEVER.passed());
        assert_eq!(Deadline::NEVER.remaining(), None);
        assert!(Deadline::after(None).is_never());
        assert!(Deadline::now().passed());
        assert_eq!(Deadline::now().remaining(), Some(Duration::ZERO));
        let later = Deadline::after(Some(Duration::from_secs(60)));
        assert!(!later.passed());
        assert!(
            later
                .remaining()
                .is_some_and(|left| left > Duration::from_secs(59))
        );
        let soon = Instant::now();
        assert_eq!(Deadline::NEVER.or_at(soon), soon);
        assert_eq!(
            Deadline::at(soon).or_at(soon + Duration::from_secs(1)),
            soon
        );
    }

    #[test]
    fn timeouts_cross_as_milliseconds_with_zero_for_none() {
        assert_eq!(timeout_ms(None), 0);
        assert_eq!(timeout_ms(Some(Duration::from_micros(10))), 1);
        assert_eq!(timeout_ms(Some(Duration::from_millis(1500))), 1500);
        assert_eq!(timeout_from_ms(0), None);
        assert_eq!(timeout_from_ms(1500), Some(Duration::from_millis(1500)));
        assert_eq!(timeout_from_signed_ms(0, "t").unwrap(), None);
        assert_eq!(
            timeout_from_signed_ms(7, "t").unwrap(),
            Some(Duration::from_millis(7))
        );
        assert_eq!(
            timeout_from_signed_ms(-7, "t").unwrap_err().message,
            "t is negative (-7)"
        );
    }
}
