//! Calls on a session as the session tests make them: owned arguments, results read as ints.

#![allow(dead_code)] // each test binary uses its own part of this module

use std::sync::Arc;

use discovm::Any;
use discovm::session::{DRef, Session, Target};

/// Broadcasts a call of `func` with `args`; the call must be sent.
pub fn call(s: &Arc<Session>, func: &DRef, args: &[Any]) -> DRef {
    let views: Vec<_> = args.iter().map(Any::view).collect();
    s.call(Target::All, func, &views).expect("call is sent")
}

/// The int a value holds (anything else fails the test).
pub fn int(value: Any) -> i64 {
    match value {
        Any::Int(v) => v,
        other => panic!("expected an int, got {other:?}"),
    }
}
