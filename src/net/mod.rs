//! Links between machines: how a node proves it may join a session
//! ([`auth`](crate::net::auth)), and how routed frames cross a TCP connection once it did
//! ([`routed`](crate::net::routed)).

pub mod auth;
pub mod routed;

/// The little-endian `u32` at byte `at` of a message's fixed part (whose length its reader
/// checked).
pub(crate) fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"))
}

/// The little-endian `u64` at byte `at` of a message's fixed part (whose length its reader
/// checked).
pub(crate) fn u64_at(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
}
