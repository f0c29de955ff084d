//! A node's board on its connection to the controller: the records of what its workers do
//! (`worker::activity`) that changed since the node last sent them, so that the controller's
//! status and hang reports cover workers on other machines; `WIRE.md` ("Routed frames") gives
//! the layout.
//!
//! The one idea: an entry is fixed-size fields, then two texts no longer than a record keeps,
//! so a reader checks every value and length against a record's own bounds before it takes
//! the texts, and a board it accepts encodes again to the same bytes.

use crate::ccl::Collective;
pub use crate::net::routed::BOARD_ENTRY_FIXED as ENTRY_FIXED;
use crate::net::{u32_at, u64_at};
use crate::object::{Error, Result};
use crate::worker::activity::{
    COMMS, Comm, Joins, MAX_FAILURE_BYTES, MAX_FUNCTION_BYTES, Snapshot, State, cut, peer_ids,
    peer_words,
};

/// Where an entry's bits of awaited peers begin.
const PEERS_AT: usize = 48;
/// Where an entry's joins begin.
const JOINS_AT: usize = 88;

/// One worker's entry on its node's board.
#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    /// Its place on the node.
    pub local: u32,
    pub pid: u32,
    /// Its record, as the node read it when it sent the board.
    pub report: Snapshot,
}

/// Appends `entries` to `out`, each text cut to what a record keeps.
pub fn encode(entries: &[Entry], out: &mut Vec<u8>) {
    for Entry { local, pid, report } in entries {
        let function = cut(report.function.as_deref().unwrap_or(""), MAX_FUNCTION_BYTES);
        let (failed_call, failure) = match &report.failure {
            Some((call, text)) if *call != 0 => (*call, cut(text, MAX_FAILURE_BYTES)),
            _ => (0, ""),
        };
        let peers = peer_words(report.waits_for.iter().copied());
        for word in [*local, *pid, report.state.code(), report.collective] {
            out.extend_from_slice(&word.to_le_bytes());
        }
        let times = [report.call, report.for_ns, report.finished, failed_call];
        for word in times.into_iter().chain(peers) {
            out.extend_from_slice(&word.to_le_bytes());
        }
        for len in [function.len(), failure.len()] {
            out.extend_from_slice(&(len as u32).to_le_bytes());
        }
        let joins = &report.joins;
        for word in [joins.finished_all, joins.call] {
            out.extend_from_slice(&word.to_le_bytes());
        }
        for word in [u32::from(joins.to_all), joins.on] {
            out.extend_from_slice(&word.to_le_bytes());
        }
        for count in joins.counts {
            out.extend_from_slice(&count.to_le_bytes());
        }
        for word in [joins.what, 0] {
            out.extend_from_slice(&word.to_le_bytes());
        }
        out.extend_from_slice(&joins.size.to_le_bytes());
        out.extend_from_slice(function.as_bytes());
        out.extend_from_slice(failure.as_bytes());
    }
}

/// Reads the entries of a board. A `ValueError` names the entry, the field and its value when
/// an entry is cut short, a state or collective has no such code, a text is longer than a
/// record keeps or is not UTF-8, or a failure's text comes without the call that failed.
pub fn decode(bytes: &[u8]) -> Result<Vec<Entry>> {
    let mut entries = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let (entry, len) = decode_entry(&bytes[at..]).map_err(|why| {
            Error::value(format!(
                "a board's entry {} (at byte {at}) has {why}",
                entries.len()
            ))
        })?;
        entries.push(entry);
        at += len;
    }
    Ok(entries)
}

/// Reads the entry that `bytes` start with, and its length; the error says what is wrong.
fn decode_entry(bytes: &[u8]) -> std::result::Result<(Entry, usize), String> {
    let fixed = bytes
        .get(..ENTRY_FIXED)
        .ok_or_else(|| format!("{} bytes, where its fields take {ENTRY_FIXED}", bytes.len()))?;
    let state = State::from_code(u32_at(fixed, 8))
        .ok_or_else(|| format!("state {} (0 to 3)", u32_at(fixed, 8)))?;
    let collective = u32_at(fixed, 12);
    let joined_what = u32_at(fixed, JOINS_AT + 48);
    for (code, which) in [
        (collective, "collective"),
        (joined_what, "last collective joined"),
    ] {
        if code != 0 && Collective::from_code(code).is_none() {
            return Err(format!(
                "{which} {code} (0, or 1 to {})",
                Collective::all().count()
            ));
        }
    }
    let padding = u32_at(fixed, JOINS_AT + 52);
    if padding != 0 {
        return Err(format!("padding {padding} after its joins (0)"));
    }
    let failed_call = u64_at(fixed, 40);
    let to_all = match u32_at(fixed, JOINS_AT + 16) {
        0 => false,
        1 => true,
        other => return Err(format!("a call to every worker flagged {other} (0 or 1)")),
    };
    let on = u32_at(fixed, JOINS_AT + 20);
    if Comm::from_code(on).is_none() {
        return Err(format!("a communicator {on} (0 to {})", COMMS - 1));
    }
    let joins = Joins {
        finished_all: u64_at(fixed, JOINS_AT),
        call: u64_at(fixed, JOINS_AT + 8),
        to_all,
        on,
        what: joined_what,
        size: u64_at(fixed, JOINS_AT + 56),
        counts: std::array::from_fn(|i| u64_at(fixed, JOINS_AT + 24 + 8 * i)),
    };
    let (function_len, failure_len) = (u32_at(fixed, 80) as usize, u32_at(fixed, 84) as usize);
    if function_len > MAX_FUNCTION_BYTES {
        return Err(format!(
            "a function's name of {function_len} bytes (at most {MAX_FUNCTION_BYTES})"
        ));
    }
    if failure_len > MAX_FAILURE_BYTES {
        return Err(format!(
            "a failure of {failure_len} bytes (at most {MAX_FAILURE_BYTES})"
        ));
    }
    if failed_call == 0 && failure_len != 0 {
        return Err(format!(
            "a failure of {failure_len} bytes, but no call that failed"
        ));
    }
    let len = ENTRY_FIXED + function_len + failure_len;
    let texts = bytes.get(ENTRY_FIXED..len).ok_or_else(|| {
        format!(
            "{} bytes, where its fields and texts take {len}",
            bytes.len()
        )
    })?;
    let text = |bytes: &[u8], what: &str| {
        String::from_utf8(bytes.to_vec()).map_err(|_| format!("a {what} that is not UTF-8"))
    };
    let function = text(&texts[..function_len], "function's name")?;
    let failure = text(&texts[function_len..], "failure")?;
    let report = Snapshot {
        state,
        call: u64_at(fixed, 16),
        function: Some(function).filter(|name| !name.is_empty()),
        for_ns: u64_at(fixed, 24),
        collective,
        waits_for: peer_ids(|i| u64_at(fixed, PEERS_AT + i * 8)),
        finished: u64_at(fixed, 32),
        failure: (failed_call != 0).then_some((failed_call, failure)),
        joins,
    };
    let entry = Entry {
        local: u32_at(fixed, 0),
        pid: u32_at(fixed, 4),
        report,
    };
    Ok((entry, len))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::worker::activity::MAX_PEERS;

    fn entry(local: u32, state: State, failure: Option<(u64, &str)>) -> Entry {
        Entry {
            local,
            pid: 4711 + local,
            report: Snapshot {
                state,
                call: 7,
                function: Some("mlp.step".to_string()),
                for_ns: 2_000_000_000,
                collective: Collective::Allreduce.code(),
                waits_for: vec![0, 63, 64, 255],
                finished: 6,
                failure: failure.map(|(call, text)| (call, text.to_string())),
                joins: Joins {
                    finished_all: 5,
                    call: 7,
                    to_all: true,
                    on: Comm::Leaders.code() as u32,
                    what: Collective::Barrier.code(),
                    size: 4096,
                    counts: [3, 0, 9],
                },
            },
        }
    }

    fn encoded(entries: &[Entry]) -> Vec<u8> {
        let mut out = Vec::new();
        encode(entries, &mut out);
        out
    }

    #[test]
    fn boards_round_trip_with_the_layout_wire_md_gives() {
        let board = [
            entry(0, State::Collective, None),
            entry(1, State::Idle, Some((5, "ValueError: é"))),
        ];
        let bytes = encoded(&board);
        assert_eq!(bytes.len(), 2 * ENTRY_FIXED + 2 * "mlp.step".len() + 14);
        assert_eq!(decode(&bytes).unwrap(), board);
        // The second entry's fields, where WIRE.md puts them.
        let second = &bytes[ENTRY_FIXED + 8..];
        assert_eq!(&second[..4], &1u32.to_le_bytes(), "its place");
        assert_eq!(&second[4..8], &4712u32.to_le_bytes(), "its pid");
        assert_eq!(&second[8..12], &0u32.to_le_bytes(), "idle");
        assert_eq!(&second[16..24], &7u64.to_le_bytes(), "its call");
        assert_eq!(&second[40..48], &5u64.to_le_bytes(), "the call that failed");
        let peers = 1u64 | 1 << 63;
        assert_eq!(&second[48..56], &peers.to_le_bytes(), "peers 0 and 63");
        assert_eq!(&second[80..88], &[8, 0, 0, 0, 14, 0, 0, 0]);
        assert_eq!(
            &second[88..96],
            &5u64.to_le_bytes(),
            "the last call to all it finished"
        );
        assert_eq!(
            &second[96..104],
            &7u64.to_le_bytes(),
            "the call of its last join"
        );
        assert_eq!(
            &second[104..112],
            &[1, 0, 0, 0, 2, 0, 0, 0],
            "to all; the leaders'"
        );
        assert_eq!(
            &second[128..136],
            &9u64.to_le_bytes(),
            "joins on the leaders' mesh"
        );
        assert_eq!(
            &second[136..144],
            &[6, 0, 0, 0, 0, 0, 0, 0],
            "the last joined a barrier; padding"
        );
        assert_eq!(&second[144..152], &4096u64.to_le_bytes(), "its size");
        assert_eq!(&second[152..160], b"mlp.step");
    }

    #[test]
    fn wire_md_lists_the_collectives_in_the_order_of_their_codes() {
        let names: Vec<&str> = Collective::all().map(Collective::what).collect();
        let row = format!("else 1 + its place in: {} (the", names.join(", "));
        assert!(
            include_str!("../../../WIRE.md").contains(&row),
            "WIRE.md lacks `{row}`"
        );
    }

    #[test]
    fn texts_longer_than_a_record_keeps_are_cut_and_peers_beyond_are_left_out() {
        let mut long = entry(0, State::Running, Some((3, &"x".repeat(1000))));
        long.report.function = Some("é".repeat(MAX_FUNCTION_BYTES));
        long.report.waits_for.push(MAX_PEERS);
        let read = &decode(&encoded(&[long])).unwrap()[0].report;
        assert_eq!(read.function, Some("é".repeat(MAX_FUNCTION_BYTES / 2)));
        assert_eq!(read.failure, Some((3, "x".repeat(MAX_FAILURE_BYTES))));
        assert_eq!(read.waits_for, vec![0, 63, 64, 255]);
    }

    #[test]
    fn bad_entries_are_refused_naming_the_field_and_its_value() {
        let good = encoded(&[entry(0, State::Idle, Some((5, "boom")))]);
        let bad = |at: usize, value: &[u8]| {
            let mut bytes = good.clone();
            bytes[at..at + value.len()].copy_from_slice(value);
            decode(&bytes).unwrap_err().message
        };
        assert_eq!(
            bad(8, &9u32.to_le_bytes()),
            "a board's entry 0 (at byte 0) has state 9 (0 to 3)"
        );
        assert!(bad(12, &99u32.to_le_bytes()).contains("collective 99 (0, or 1 to 11)"));
        assert!(bad(80, &65u32.to_le_bytes()).contains("a function's name of 65 bytes"));
        assert!(bad(84, &257u32.to_le_bytes()).contains("a failure of 257 bytes (at most 256)"));
        assert!(bad(40, &0u64.to_le_bytes()).contains("but no call that failed"));
        assert!(bad(104, &2u32.to_le_bytes()).contains("flagged 2 (0 or 1)"));
        assert!(bad(108, &3u32.to_le_bytes()).contains("a communicator 3 (0 to 2)"));
        assert!(bad(136, &12u32.to_le_bytes()).contains("last collective joined 12 (0, or 1"));
        assert!(bad(140, &1u32.to_le_bytes()).contains("padding 1 after its joins (0)"));
        assert!(bad(152, &[0xff]).contains("a function's name that is not UTF-8"));
        let message = decode(&good[..good.len() - 1]).unwrap_err().message;
        assert!(
            message.contains("where its fields and texts take 164"),
            "{message}"
        );
        let mut two = good.clone();
        two.extend_from_slice(&good[..10]);
        let message = decode(&two).unwrap_err().message;
        assert_eq!(
            message,
            "a board's entry 1 (at byte 164) has 10 bytes, where its fields take 152"
        );
    }
}
