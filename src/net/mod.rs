//! Links between machines: how a node proves it may join a session
//! ([`auth`](crate::net::auth)), and how routed frames cross a TCP connection once it did
//! ([`routed`](crate::net::routed)).

pub mod auth;
pub mod routed;
