//! What the controller tells a worker outside its queue (`worker::Signals`), as one value that
//! goes the same way to every worker: written into the worker's signals where the controller
//! reaches them (its threads, its worker processes), or sent to the worker's node, which writes
//! them there (`WIRE.md`, "Routed frames").
//!
//! The one idea: a worker waits on something that cannot end by itself (its GPU's work, a
//! Gloo peer) only while watching its signals, so a signal ends any such wait, on any machine.

use std::io::{self, Write};

use crate::net::routed::{self, MAX_SIGNAL_TEXT, SIGNAL_FIXED};
use crate::net::{u32_at, u64_at};
use crate::object::{Error, Result};
use crate::sync::atomic::Ordering;
use crate::worker::Signals;
use crate::worker::activity::cut;

/// One signal for a worker.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Signal {
    /// The session stops.
    Stopping,
    /// `init_ccl` sends new communicators.
    NewCommunicators,
    /// The collective the worker waits in, in call `call`, will never complete, because `why`.
    Ruling { call: u64, why: String },
}

impl Signal {
    fn code(&self) -> u32 {
        match self {
            Signal::Stopping => 1,
            Signal::NewCommunicators => 2,
            Signal::Ruling { .. } => 3,
        }
    }

    /// Notes the signal in a worker's `signals`.
    pub fn apply(&self, signals: &Signals) {
        match self {
            Signal::Stopping => signals.stopping.store(true, Ordering::SeqCst),
            Signal::NewCommunicators => {
                signals.ccl_generation.fetch_add(1, Ordering::SeqCst);
            }
            Signal::Ruling { call, why } => signals.ruling.rule(*call, why),
        }
    }

    /// Writes the signal for the worker(s) of `route` on a node's connection (a ruling's reason
    /// cut to what a signal holds).
    pub fn write(&self, out: &mut impl Write, route: u32) -> io::Result<()> {
        let (call, text) = match self {
            Signal::Ruling { call, why } => (*call, cut(why, MAX_SIGNAL_TEXT)),
            _ => (0, ""),
        };
        routed::write_signal(out, route, self.code(), call, text.as_bytes())
    }

    /// Reads a signal from what follows its route and length; the error names what is wrong.
    pub fn read(bytes: &[u8]) -> Result<Signal> {
        let fixed = bytes.get(..SIGNAL_FIXED).ok_or_else(|| {
            Error::value(format!(
                "a signal of {} bytes (at least {SIGNAL_FIXED})",
                bytes.len()
            ))
        })?;
        let (kind, call) = (u32_at(fixed, 0), u64_at(fixed, 8));
        let text = &bytes[SIGNAL_FIXED..];
        let plain = |signal: Signal| match call == 0 && text.is_empty() {
            true => Ok(signal),
            false => Err(Error::value(format!(
                "a signal of kind {kind} with a call or a text"
            ))),
        };
        match kind {
            1 => plain(Signal::Stopping),
            2 => plain(Signal::NewCommunicators),
            3 if call != 0 => {
                let why = String::from_utf8(text.to_vec())
                    .map_err(|_| Error::value("a ruling whose reason is not UTF-8"))?;
                Ok(Signal::Ruling { call, why })
            }
            3 => Err(Error::value("a ruling on call 0")),
            other => Err(Error::value(format!(
                "a signal of unknown kind {other} (1 to 3)"
            ))),
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::net::routed::{What, read};
    use crate::wire::Limits;

    fn round_trip(signal: &Signal, route: u32) -> Signal {
        let mut bytes = Vec::new();
        signal.write(&mut bytes, route).unwrap();
        let message = read(&mut bytes.as_slice(), &Limits::default(), Vec::new()).unwrap();
        assert_eq!((message.route, message.what), (route, What::Signal));
        Signal::read(&message.frame).unwrap()
    }

    #[test]
    fn signals_cross_a_node_connection_unchanged() {
        let ruling = Signal::Ruling {
            call: 7,
            why: "allreduce in call 7: worker 1 finished call 7 without joining it".into(),
        };
        for signal in [Signal::Stopping, Signal::NewCommunicators, ruling] {
            assert_eq!(round_trip(&signal, 3), signal);
        }
        let long = Signal::Ruling {
            call: 2,
            why: "é".repeat(MAX_SIGNAL_TEXT),
        };
        let Signal::Ruling { why, .. } = round_trip(&long, routed::ALL) else {
            panic!("a ruling");
        };
        assert_eq!(
            why,
            "é".repeat(MAX_SIGNAL_TEXT / 2),
            "cut at a character boundary"
        );
    }

    #[test]
    fn bad_signals_are_refused_naming_what_is_wrong() {
        let with = |kind: u32, call: u64, text: &[u8]| {
            let mut bytes = kind.to_le_bytes().to_vec();
            bytes.extend_from_slice(&[0; 4]);
            bytes.extend_from_slice(&call.to_le_bytes());
            bytes.extend_from_slice(text);
            Signal::read(&bytes).unwrap_err().message
        };
        assert_eq!(with(9, 0, b""), "a signal of unknown kind 9 (1 to 3)");
        assert_eq!(with(1, 4, b""), "a signal of kind 1 with a call or a text");
        assert_eq!(with(3, 0, b"why"), "a ruling on call 0");
        assert_eq!(with(3, 5, &[0xff]), "a ruling whose reason is not UTF-8");
        assert!(
            Signal::read(&[0; 8])
                .unwrap_err()
                .message
                .contains("8 bytes")
        );
    }

    #[test]
    fn signals_reach_the_workers_signals() {
        let signals = Signals::default();
        Signal::NewCommunicators.apply(&signals);
        Signal::Ruling {
            call: 4,
            why: "gone".into(),
        }
        .apply(&signals);
        assert_eq!(signals.ccl_generation.load(Ordering::SeqCst), 1);
        assert_eq!(signals.ruling.on(4).as_deref(), Some("gone"));
        assert_eq!(signals.ruling.on(5), None);
        Signal::Stopping.apply(&signals);
        assert!(signals.stopping.load(Ordering::SeqCst));
    }
}
