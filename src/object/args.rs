//! Reading the arguments of a packed call: how many there are, which are optional, and errors
//! that say which argument was wrong ("argument 2 (timeout_ms): expected int but got str").

use super::any::AnyView;
use super::error::{Error, Result};
use crate::abi::type_index as ti;

/// Fails with a `TypeError` unless the packed function `name` got between `min` and `max`
/// arguments (`usize::MAX`: any number from `min` on).
pub fn arity(name: &str, args: &[AnyView<'_>], min: usize, max: usize) -> Result<()> {
    let expected = if (min..=max).contains(&args.len()) {
        return Ok(());
    } else if min == max {
        format!("{min}")
    } else if max == usize::MAX {
        format!("at least {min}")
    } else {
        format!("{min} to {max}")
    };
    Err(Error::type_error(format!(
        "`{name}` takes {expected} arguments but got {}",
        args.len()
    )))
}

/// Reads argument `i`; an error names it by position and by `what`.
pub fn argument<T>(i: usize, what: &str, read: impl FnOnce() -> Result<T>) -> Result<T> {
    read().map_err(|e| Error::new(e.kind, format!("argument {i} ({what}): {}", e.message)))
}

/// Whether argument `i` is absent or None.
pub fn is_none(args: &[AnyView<'_>], i: usize) -> bool {
    args.get(i).is_none_or(|v| v.type_index() == ti::NONE)
}

/// An optional argument: absent or None gives `default`.
pub fn optional<'a, T>(
    args: &[AnyView<'a>],
    i: usize,
    what: &str,
    default: T,
    read: impl FnOnce(&AnyView<'a>) -> Result<T>,
) -> Result<T> {
    if is_none(args, i) {
        Ok(default)
    } else {
        argument(i, what, || read(&args[i]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Any;

    #[test]
    fn errors_name_the_function_and_the_argument() {
        let (one, none) = (Any::Int(1), Any::None);
        let args = [one.view(), none.view()];
        let err = arity("f", &args, 3, usize::MAX).unwrap_err();
        assert_eq!(err.message, "`f` takes at least 3 arguments but got 2");
        assert_eq!(
            arity("f", &args, 0, 1).unwrap_err().message,
            "`f` takes 0 to 1 arguments but got 2"
        );
        assert_eq!(
            arity("f", &args, 1, 1).unwrap_err().message,
            "`f` takes 1 arguments but got 2"
        );
        assert!(arity("f", &args, 2, usize::MAX).is_ok());
        assert_eq!(optional(&args, 1, "n", 7, AnyView::as_i64).unwrap(), 7);
        assert_eq!(optional(&args, 5, "n", 7, AnyView::as_i64).unwrap(), 7);
        let cpu = crate::abi::DLDevice::cpu();
        let err = optional(&args, 0, "device", cpu, AnyView::as_device).unwrap_err();
        assert_eq!(
            err.message,
            "argument 0 (device): expected Device but got int"
        );
    }
}
