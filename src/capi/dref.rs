//! DRefs: remote references to a register on every worker of a session.

use std::mem::ManuallyDrop;

use super::{boundary, dvm_status, handle_ref, lend, non_null, write_out};
use crate::abi::DVMAny;
use crate::object::AnyView;
use crate::session::{DRef, DRefCell};

/// A remote reference (an object: it may travel inside `DVMAny` arguments of session calls).
#[allow(non_camel_case_types)]
pub struct dvm_dref {
    _opaque: [u8; 0],
}

/// The DRef behind a handle, lent for the call.
///
/// # Safety
/// `r` is NULL or a live object handle.
pub(crate) unsafe fn dref_arg(r: *const dvm_dref, name: &str) -> crate::Result<ManuallyDrop<DRef>> {
    // SAFETY: as the caller promises.
    let object = unsafe { handle_ref::<DRefCell, _>(r, name, "a DRef") }?;
    Ok(lend(object, DRef::from_object))
}

pub(crate) fn dref_handle(dref: DRef) -> *mut dvm_dref {
    dref.into_object().into_raw().as_ptr().cast()
}

/// Reads the value the register holds on `worker`, after every call sent before.
///
/// Ownership: `*out` is an owned copy (objects gain a reference); release it with
/// `dvm_any_release`.
/// Errors: `IndexError` for a worker out of range; `WorkerError` if the call that should have
/// filled the register failed (its cause in the message) or the register is empty there;
/// `TimeoutError`, `SessionClosed` as for syncs; `ValueError` for NULL pointers.
/// Undefined: `dref` after its last release.
/// Thread safety: any thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dvm_dref_get(
    dref: *const dvm_dref,
    worker: i32,
    out: *mut DVMAny,
) -> dvm_status {
    boundary(|| {
        let out = non_null(out, "out")?;
        // SAFETY: NULL or a live handle, by contract.
        let value = unsafe { dref_arg(dref, "dref") }?.get(worker.into())?;
        // SAFETY: checked non-NULL above.
        unsafe { write_out(out, value.into_raw()) };
        Ok(())
    })
}

/// Sets the value of the register on `worker`, after every call sent before (returns at once).
///
/// Ownership: `value` is borrowed and copied (objects gain a reference).
/// Errors: `IndexError` for a worker out of range; `TypeError` for a value that cannot be kept
/// (a borrowed `DLTensor*`), an unknown type index or an object of another type than its index
/// says; `ValueError` for NULL pointers or a malformed value (as for `dvm_func_call`);
/// `SessionClosed` after shutdown.
/// Undefined: `value` whose pointer does not point at what its type index says;
/// `dref` after its last release.
/// Thread safety: any thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dvm_dref_set(
    dref: *const dvm_dref,
    worker: i32,
    value: *const DVMAny,
) -> dvm_status {
    boundary(|| {
        let value = non_null(value, "value")?;
        // SAFETY: NULL or a live handle, by contract.
        let dref = unsafe { dref_arg(dref, "dref") }?;
        // SAFETY: the caller vouches for the value for the duration of the call.
        let view = unsafe { AnyView::from_raw(*value.as_ptr()) };
        let value = view
            .validate()
            .and_then(|()| view.to_owned())
            .map_err(|e| e.context("`value`"))?;
        dref.set(worker.into(), value)
    })
}

/// Drops a reference to a DRef (to any object: it is dropped as by `dvm_object_dec_ref`).
/// NULL is fine. When the last reference goes, the register is
/// freed on every worker, after every call sent before.
///
/// Undefined: dropping a reference the caller does not own.
/// Thread safety: any thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dvm_dref_free(dref: *mut dvm_dref) {
    if !dref.is_null() {
        // SAFETY: the caller gives up a reference it owns.
        unsafe { super::dvm_object_dec_ref(dref.cast()) };
    }
}
