//! A node's part in a trace: its clock, read by the controller in round trips over the
//! session's connection, and its workers' events, which the node collects from their rings
//! while a trace runs and sends at its stop (or, for a dump, the rings' last events).
//!
//! The one idea: a node's events keep the node's own clock, and the controller moves them onto
//! its own by the offset of the round trip that came back soonest: the node read its clock
//! between the controller's send and the reply's arrival, so the offset's error is at most
//! half that round trip, which the trace's metadata gives with it.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::channel::{Deadline, Sleepers, SpinPolicy};
use crate::net::routed::TRACE_FIXED;
use crate::net::{u32_at, u64_at};
use crate::object::{Error, ErrorKind, Result};
use crate::session::process::ProcessLink;
use crate::session::trace::collect::{Clock, Collected, Collector, Rings, lock};
use crate::worker::events::{Event, Kind, LANES, NAME_BYTES, Ring, now_ns};

/// Controller to node: read your clock (the stamp is the controller's clock when it sent);
/// node to controller: the reading (the same stamp, then the node's clock).
pub(crate) const CLOCK: u32 = 1;
/// Controller to node: collect your workers' events from now on.
pub(crate) const START: u32 = 2;
/// Controller to node: stop collecting, and send the events (the stamp names the request).
pub(crate) const STOP: u32 = 3;
/// Controller to node: send your workers' last events (the stamp names the request).
pub(crate) const DUMP: u32 = 4;
/// Node to controller: events of the worker at `local`, for the request of the stamp.
const EVENTS: u32 = 5;
/// Node to controller: every event of the request of the stamp was sent; then the events lost
/// and dropped (`u64`s).
const DONE: u32 = 6;

/// The stamp of events sent unasked: a dead worker's last.
const LAST_WORDS: u64 = 0;
/// Round trips a clock reading takes; the soonest back gives the offset.
const CLOCK_TRIPS: usize = 8;
/// How long a reading may take to come back.
const CLOCK_WAIT: Duration = Duration::from_secs(2);
/// How long the controller waits for a node's events with nothing coming.
const EVENTS_SILENCE: Duration = Duration::from_secs(10);
/// Bytes of events a node sends in one message at most (a message is sent when it passed them).
const EVENTS_CHUNK: usize = 1 << 20;
/// Bytes of an event before its name.
const EVENT_FIXED: usize = 56;

/// A trace message's fixed part, read.
struct Head<'a> {
    what: u32,
    local: u32,
    stamp: u64,
    body: &'a [u8],
}

fn bad(what: impl std::fmt::Display) -> Error {
    Error::value(format!("a bad trace message: {what}"))
}

fn head(message: &[u8]) -> Result<Head<'_>> {
    if message.len() < TRACE_FIXED {
        return Err(bad(format_args!(
            "{} bytes, fewer than its fixed part's {TRACE_FIXED}",
            message.len()
        )));
    }
    Ok(Head {
        what: u32_at(message, 0),
        local: u32_at(message, 4),
        stamp: u64_at(message, 8),
        body: &message[TRACE_FIXED..],
    })
}

/// Appends `event` to `out`: its fixed fields, its name's length, then its name, padded to 8.
pub(crate) fn encode_event(event: &Event, out: &mut Vec<u8>) {
    let name = event.name.as_bytes();
    out.extend_from_slice(&event.kind.code().to_le_bytes());
    out.extend_from_slice(&event.detail.to_le_bytes());
    for word in [
        event.start_ns,
        event.dur_ns,
        event.call,
        event.bytes,
        event.wait_ns,
    ] {
        out.extend_from_slice(&word.to_le_bytes());
    }
    out.extend_from_slice(&(name.len() as u32).to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    out.extend_from_slice(name);
    out.resize(out.len() + name.len().next_multiple_of(8) - name.len(), 0);
}

/// Reads events encoded by [`encode_event`], back to back.
///
/// Errors: `ValueError` naming the event and what is wrong with it.
pub(crate) fn decode_events(mut bytes: &[u8]) -> Result<Vec<Event>> {
    let mut events = Vec::new();
    while !bytes.is_empty() {
        let n = events.len();
        if bytes.len() < EVENT_FIXED {
            return Err(bad(format_args!(
                "event {n} is cut short: {} bytes of its {EVENT_FIXED} fixed ones",
                bytes.len()
            )));
        }
        let code = u32_at(bytes, 0);
        let kind = Kind::from_code(code)
            .ok_or_else(|| bad(format_args!("event {n} is of unknown kind {code}")))?;
        let (len, zero) = (u32_at(bytes, 48) as usize, u32_at(bytes, 52));
        if len > NAME_BYTES || zero != 0 {
            return Err(bad(format_args!(
                "event {n} has a name of {len} bytes (at most {NAME_BYTES}) and {zero} where a \
                 zero is"
            )));
        }
        let size = EVENT_FIXED + len.next_multiple_of(8);
        if bytes.len() < size {
            return Err(bad(format_args!("event {n}'s name is cut short")));
        }
        let name = std::str::from_utf8(&bytes[EVENT_FIXED..EVENT_FIXED + len])
            .map_err(|_| bad(format_args!("event {n}'s name is not UTF-8")))?;
        events.push(Event {
            kind,
            start_ns: u64_at(bytes, 8),
            dur_ns: u64_at(bytes, 16),
            call: u64_at(bytes, 24),
            bytes: u64_at(bytes, 32),
            wait_ns: u64_at(bytes, 40),
            detail: u32_at(bytes, 4),
            name: name.into(),
        });
        bytes = &bytes[size..];
    }
    Ok(events)
}

/// Sends one trace message: what it is, a worker's index on the node, a stamp and a body.
pub(crate) type Sender<'a> = &'a dyn Fn(u32, u32, u64, &[u8]) -> std::io::Result<()>;

/// The node's side: its workers' rings, and the collector of a trace that runs.
pub(crate) struct Keeper {
    links: Arc<Vec<ProcessLink>>,
    running: Mutex<Option<Collector>>,
}

impl Rings for Vec<ProcessLink> {
    fn count(&self) -> usize {
        self.len()
    }

    fn rings(&self, index: usize) -> [Option<&Ring>; LANES] {
        [
            Some(self[index].events()),
            Some(self[index].stream_events()),
        ]
    }
}

impl Keeper {
    pub fn new(links: Arc<Vec<ProcessLink>>) -> Keeper {
        Keeper {
            links,
            running: Mutex::new(None),
        }
    }

    /// Does what the controller's trace `message` asks, answering with `send`.
    ///
    /// Errors: `ValueError` for a message that is not the controller's to send; a failure to
    /// send (the controller is gone) as a `RuntimeError`.
    pub fn take(&self, message: &[u8], send: Sender<'_>) -> Result<()> {
        let Head { what, stamp, .. } = head(message)?;
        let sent = match what {
            CLOCK => send(CLOCK, 0, stamp, &now_ns().to_le_bytes()),
            START => {
                let collector = Collector::start(self.links.clone(), || false)?;
                // A trace started again replaces one its controller never stopped.
                if let Some(old) = lock(&self.running).replace(collector) {
                    old.finish();
                }
                Ok(())
            }
            STOP => {
                let running = lock(&self.running).take();
                let collected = running.map_or_else(Collected::default, Collector::finish);
                send_collected(&collected, stamp, send)
            }
            DUMP => send_collected(&Collected::last(&*self.links), stamp, send),
            other => {
                return Err(bad(format_args!(
                    "{other} is not a request of the controller"
                )));
            }
        };
        sent.map_err(|e| Error::runtime(format!("sending the node's trace failed: {e}")))
    }
}

impl Drop for Keeper {
    fn drop(&mut self) {
        if let Some(running) = lock(&self.running).take() {
            running.finish();
        }
    }
}

/// Sends `events` of the worker at `local` for the request `stamp`, in messages of about
/// [`EVENTS_CHUNK`] bytes.
fn send_events<'a>(
    local: usize,
    events: impl IntoIterator<Item = &'a Event>,
    stamp: u64,
    send: Sender<'_>,
) -> std::io::Result<()> {
    let mut body = Vec::new();
    for event in events {
        encode_event(event, &mut body);
        if body.len() >= EVENTS_CHUNK {
            send(EVENTS, local as u32, stamp, &body)?;
            body.clear();
        }
    }
    match body.is_empty() {
        true => Ok(()),
        false => send(EVENTS, local as u32, stamp, &body),
    }
}

/// Sends the last events of the worker at `local`, which died, unasked (stamp 0), before its
/// death notice: the node's connection ends with the notice, and they are that worker's last
/// words in the session's trace or dump: its own and its streams'.
pub(crate) fn send_last_words(link: &ProcessLink, local: u32, send: Sender<'_>) {
    let (own, streams) = (link.events().last(), link.stream_events().last());
    // A controller that is gone hears nothing more anyway.
    let _ = send_events(
        local as usize,
        own.events.iter().chain(&streams.events),
        LAST_WORDS,
        send,
    );
}

/// Sends `collected`'s events, worker by worker, then the end of the request `stamp`.
fn send_collected(collected: &Collected, stamp: u64, send: Sender<'_>) -> std::io::Result<()> {
    for (local, events) in collected.workers.iter().enumerate() {
        send_events(local, events.iter(), stamp, send)?;
    }
    let mut counts = collected.lost.to_le_bytes().to_vec();
    counts.extend_from_slice(&collected.dropped.to_le_bytes());
    send(DONE, 0, stamp, &counts)
}

/// A clock reading that came back: the controller's clock when it sent and when the reply
/// came, and the node's between.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Reading {
    sent_ns: u64,
    node_ns: u64,
    came_ns: u64,
}

impl Reading {
    /// The offset this reading gives, and its error bound.
    fn clock(&self) -> Clock {
        let trip = self.came_ns.saturating_sub(self.sent_ns);
        let middle = self.sent_ns + trip / 2;
        Clock {
            offset_ns: self.node_ns as i64 - middle as i64,
            bound_ns: trip.div_ceil(2),
        }
    }
}

/// What came of the controller's requests to a node, gathered by the connection's reader.
#[derive(Default)]
struct Gathering {
    readings: Vec<Reading>,
    /// The request whose events gather (0: none).
    request: u64,
    collected: Collected,
    done: bool,
    /// When the request's last message came.
    came_ns: u64,
    /// The last events of the node's workers that died, by index on the node.
    last_words: Vec<Vec<Event>>,
    /// The node's clock, as the latest reading found it.
    clock: Option<Clock>,
}

/// The controller's side: the node's answers, and the requests' waits for them.
#[derive(Default)]
pub(crate) struct Replies {
    gathering: Mutex<Gathering>,
    arrived: Sleepers,
    requests: std::sync::atomic::AtomicU64,
}

impl Replies {
    /// Takes the node's trace `message` (on the connection's reader), for a node of `count`
    /// workers.
    ///
    /// Errors: `ValueError` for a message that is not the node's to send, or a bad one.
    pub fn take(&self, message: &[u8], count: usize) -> Result<()> {
        let came_ns = now_ns();
        let Head {
            what,
            local,
            stamp,
            body,
        } = head(message)?;
        let mut gathering = lock(&self.gathering);
        match what {
            CLOCK => {
                if body.len() != 8 {
                    return Err(bad(format_args!("a clock reading of {} bytes", body.len())));
                }
                gathering.readings.push(Reading {
                    sent_ns: stamp,
                    node_ns: u64_at(body, 0),
                    came_ns,
                });
            }
            EVENTS => {
                let local = local as usize;
                if local >= count {
                    return Err(bad(format_args!(
                        "events of worker {local} of a node of {count} workers"
                    )));
                }
                let events = decode_events(body)?;
                if stamp == LAST_WORDS {
                    gathering.last_words.resize_with(count, Vec::new);
                    gathering.last_words[local].extend(events);
                } else if stamp == gathering.request {
                    gathering.collected.keep(local, events);
                    gathering.came_ns = came_ns;
                }
            }
            DONE => {
                if body.len() != 16 {
                    return Err(bad(format_args!("an end of {} bytes, not 16", body.len())));
                }
                if stamp == gathering.request {
                    gathering.collected.lost += u64_at(body, 0);
                    gathering.collected.dropped += u64_at(body, 8);
                    gathering.done = true;
                }
            }
            other => return Err(bad(format_args!("{other} is not an answer of a node"))),
        }
        drop(gathering);
        self.arrived.wake_all();
        Ok(())
    }

    /// Reads the node's clock: [`CLOCK_TRIPS`] round trips, each sent by `send` with its stamp;
    /// the one back soonest gives the offset. `check` ends the wait when the node is gone.
    pub fn clock(
        &self,
        send: impl Fn(u64) -> Result<()>,
        mut check: impl FnMut() -> Result<()>,
    ) -> Result<Clock> {
        let mut best: Option<Clock> = None;
        for _ in 0..CLOCK_TRIPS {
            let stamp = now_ns();
            send(stamp)?;
            let reading = self.arrived.wait(
                SpinPolicy::default(),
                Deadline::after(Some(CLOCK_WAIT)),
                || "a reading of a node's clock".to_string(),
                &mut check,
                || {
                    let mut gathering = lock(&self.gathering);
                    let at = gathering.readings.iter().position(|r| r.sent_ns == stamp)?;
                    Some(gathering.readings.swap_remove(at))
                },
            )?;
            let clock = reading.clock();
            if best.is_none_or(|best| clock.bound_ns < best.bound_ns) {
                best = Some(clock);
            }
        }
        let best = best.expect("at least one round trip");
        lock(&self.gathering).clock = Some(best);
        Ok(best)
    }

    /// The last events of the node's workers that died (by index on the node; none when no
    /// worker died), and the node's clock as last read.
    pub fn last_words(&self) -> (Collected, Option<Clock>) {
        let gathering = lock(&self.gathering);
        let mut collected = Collected::for_workers(gathering.last_words.len());
        for (local, events) in gathering.last_words.iter().enumerate() {
            collected.keep(local, events.clone());
        }
        (collected, gathering.clock)
    }

    /// Asks for the node's events with `ask` (which sends `STOP` or `DUMP` with the request's
    /// stamp), and waits until every one came, for a node of `count` workers. `check` ends the
    /// wait when the node is gone; so does [`EVENTS_SILENCE`] with nothing from the node.
    pub fn events(
        &self,
        count: usize,
        ask: impl FnOnce(u64) -> Result<()>,
        mut check: impl FnMut() -> Result<()>,
    ) -> Result<Collected> {
        let request = 1 + self
            .requests
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        {
            let mut gathering = lock(&self.gathering);
            gathering.request = request;
            gathering.collected = Collected::for_workers(count);
            gathering.done = false;
            gathering.came_ns = now_ns();
        }
        ask(request)?;
        let silent = || {
            let quiet = now_ns().saturating_sub(lock(&self.gathering).came_ns);
            match Duration::from_nanos(quiet) > EVENTS_SILENCE {
                true => Err(Error::new(
                    ErrorKind::Timeout,
                    format!(
                        "the node sent nothing of its trace for {} s",
                        EVENTS_SILENCE.as_secs()
                    ),
                )),
                false => Ok(()),
            }
        };
        self.arrived.wait(
            SpinPolicy::default(),
            Deadline::NEVER,
            || "a node's events".to_string(),
            || check().and_then(|()| silent()),
            || {
                let mut gathering = lock(&self.gathering);
                gathering.done.then(|| {
                    gathering.request = 0;
                    std::mem::take(&mut gathering.collected)
                })
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(n: u64, name: &str) -> Event {
        Event {
            kind: Kind::Collective,
            start_ns: 1000 + n,
            dur_ns: 7,
            call: n,
            bytes: 4096,
            wait_ns: 3,
            detail: 2,
            name: name.into(),
        }
    }

    fn message(what: u32, local: u32, stamp: u64, body: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        crate::net::routed::write_trace(&mut out, what, local, stamp, body).unwrap();
        out[crate::net::routed::ROUTE_SIZE + 8..].to_vec()
    }

    #[test]
    fn events_round_trip_through_their_encoding() {
        let events = vec![
            event(1, "allreduce"),
            event(2, ""),
            event(3, &"n".repeat(64)),
        ];
        let mut bytes = Vec::new();
        events.iter().for_each(|e| encode_event(e, &mut bytes));
        assert_eq!(bytes.len() % 8, 0);
        assert_eq!(decode_events(&bytes).unwrap(), events);
    }

    #[test]
    fn bad_events_are_refused_naming_what_is_wrong() {
        let mut good = Vec::new();
        encode_event(&event(1, "allreduce"), &mut good);
        let with = |at: usize, value: u32| {
            let mut bytes = good.clone();
            bytes[at..at + 4].copy_from_slice(&value.to_le_bytes());
            bytes
        };
        let cases = [
            (good[..40].to_vec(), "event 0 is cut short"),
            (with(0, 9), "unknown kind 9"),
            (with(48, 65), "a name of 65 bytes"),
            (with(52, 1), "1 where a zero is"),
            (with(48, 24), "name is cut short"),
            (
                {
                    let mut bytes = good.clone();
                    bytes[EVENT_FIXED] = 0xff;
                    bytes
                },
                "not UTF-8",
            ),
        ];
        for (bytes, why) in cases {
            let error = decode_events(&bytes).unwrap_err();
            assert_eq!(error.kind, ErrorKind::Value);
            assert!(error.message.contains(why), "{why}: {error}");
        }
    }

    #[test]
    fn a_reading_gives_the_offset_within_half_its_round_trip() {
        let reading = Reading {
            sent_ns: 1_000,
            node_ns: 50_600,
            came_ns: 2_000,
        };
        assert_eq!(
            reading.clock(),
            Clock {
                offset_ns: 49_100,
                bound_ns: 500
            }
        );
    }

    #[test]
    fn a_node_s_events_gather_until_its_end_and_stale_ones_are_dropped() {
        let replies = Arc::new(Replies::default());
        let node = replies.clone();
        let collected = replies
            .events(
                2,
                |request| {
                    let mut body = Vec::new();
                    encode_event(&event(5, "allreduce"), &mut body);
                    // An answer to an older request is dropped.
                    node.take(&message(EVENTS, 0, request + 7, &body), 2)?;
                    node.take(&message(EVENTS, 1, request, &body), 2)?;
                    let counts = [3u64.to_le_bytes(), 4u64.to_le_bytes()].concat();
                    node.take(&message(DONE, 0, request, &counts), 2)
                },
                || Ok(()),
            )
            .unwrap();
        let kept: Vec<Vec<Event>> = collected
            .workers
            .iter()
            .map(|w| w.iter().cloned().collect())
            .collect();
        assert_eq!(kept, [vec![], vec![event(5, "allreduce")]]);
        assert_eq!((collected.lost, collected.dropped), (3, 4));
    }

    #[test]
    fn a_node_s_bad_answers_are_refused() {
        let replies = Replies::default();
        for (bytes, why) in [
            (vec![0u8; 8], "fewer than its fixed part's 16"),
            (message(CLOCK, 0, 1, &[0; 4]), "a clock reading of 4 bytes"),
            (
                message(EVENTS, 2, 1, &[]),
                "events of worker 2 of a node of 2",
            ),
            (message(DONE, 0, 1, &[0; 8]), "an end of 8 bytes"),
            (message(STOP, 0, 1, &[]), "3 is not an answer of a node"),
        ] {
            let error = replies.take(&bytes, 2).unwrap_err();
            assert!(error.message.contains(why), "{why}: {error}");
        }
    }

    #[test]
    fn a_clock_wait_ends_when_the_node_is_gone() {
        let replies = Replies::default();
        let error = replies
            .clock(|_| Ok(()), || Err(Error::runtime("node 1 is lost")))
            .unwrap_err();
        assert!(error.message.contains("node 1 is lost"), "{error}");
    }
}
