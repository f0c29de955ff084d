//! Links between machines: how a node proves it may join a session
//! ([`auth`](crate::net::auth)), how routed frames cross a TCP connection once it did
//! ([`routed`](crate::net::routed)), and how a node tells what its workers do
//! ([`board`](crate::net::board)).

pub mod auth;
pub mod board;
pub mod routed;
