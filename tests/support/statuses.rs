//! Reading a session's status in tests: the document parsed, each read checked to answer
//! within the bound a status promises whatever the workers do, and polled until it says what
//! a test waits for (each read of a poll within a looser bound).

#![allow(dead_code)] // each test binary uses its own part of this module

use std::time::{Duration, Instant};

use discovm::session::Session;
use serde_json::Value;

/// How soon a status answers, whatever the workers (and nodes) do.
pub const ANSWER_WITHIN: Duration = Duration::from_millis(50);

/// How soon each read of a poll answers: a poll reads many times, and a busy machine may hold
/// the polling thread past [`ANSWER_WITHIN`] once; the reads that test the bound are `status`'s.
const POLL_ANSWER_WITHIN: Duration = Duration::from_secs(1);

/// The session's status, checked to answer within [`ANSWER_WITHIN`].
pub fn status(s: &Session) -> Value {
    read(s, ANSWER_WITHIN)
}

/// The session's status, checked to answer within `within`.
fn read(s: &Session, within: Duration) -> Value {
    let asked = Instant::now();
    let text = s.status().expect("a status");
    let took = asked.elapsed();
    assert!(took < within, "the status took {took:?}");
    serde_json::from_str(&text).expect("the status is JSON")
}

/// The status once `ready` holds of it, polled for at most 20 s.
pub fn status_when(s: &Session, ready: impl Fn(&Value) -> bool) -> Value {
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let now = read(s, POLL_ANSWER_WITHIN);
        if ready(&now) {
            return now;
        }
        assert!(
            Instant::now() < until,
            "the status never became ready: {now}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Worker `id`'s entry.
pub fn worker(status: &Value, id: usize) -> &Value {
    &status["workers"][id]
}

/// The number of the last call sent.
pub fn calls_sent(s: &Session) -> u64 {
    status(s)["calls_sent"].as_u64().unwrap()
}
