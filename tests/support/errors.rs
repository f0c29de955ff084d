//! Checks on the errors the library returns, for the integration tests.

use discovm::{Error, ErrorKind};

/// Checks that `error` has `kind` and a message that contains `text`.
#[track_caller]
pub fn assert_error(error: &Error, kind: ErrorKind, text: &str) {
    assert_eq!(error.kind, kind, "{error:?}");
    assert!(
        error.message.contains(text),
        "{text:?} not in {:?}",
        error.message
    );
}
