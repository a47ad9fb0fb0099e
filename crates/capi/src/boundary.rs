//! What every entry point does at the boundary: catch panics, check
//! pointers, read C strings, hand strings out. Nothing here knows runs.

use super::{ec_status, EC_ERR_INVALID_ARGUMENT, EC_ERR_PANIC};
use edgecloud::bindings::{Error, ErrorKind};
use std::ffi::{c_char, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Why a call failed: its status and what to say.
pub(super) struct Failure {
    pub(super) status: ec_status,
    pub(super) message: String,
}

impl Failure {
    pub(super) fn new(status: ec_status, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
        }
    }

    pub(super) fn argument(message: impl Into<String>) -> Self {
        Self::new(EC_ERR_INVALID_ARGUMENT, message)
    }
}

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        Self::new(super::status_of(e.kind), message_of(&e))
    }
}

/// An error's message, naming the request field at fault when the message
/// does not already.
pub(super) fn message_of(e: &Error) -> String {
    match &e.field {
        Some(field) if e.kind == ErrorKind::InvalidRequest && !e.message.contains(field) => {
            format!("invalid request: `{field}`: {}", e.message)
        }
        _ if e.kind == ErrorKind::InvalidRequest => format!("invalid request: {}", e.message),
        _ => e.message.clone(),
    }
}

/// Runs `f` with its panics caught: a panic becomes [`EC_ERR_PANIC`]
/// with its message in `*error`; a failure its status and message.
pub(super) fn guard(
    error: *mut *mut c_char,
    f: impl FnOnce() -> Result<ec_status, Failure>,
) -> ec_status {
    // SAFETY: the caller passes `error` as NULL or writable (the header's
    // contract for every `char **error`).
    unsafe { put(error, None) };
    let failure = match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(status)) => return status,
        Ok(Err(failure)) => failure,
        Err(payload) => Failure::new(
            EC_ERR_PANIC,
            format!(
                "edgecloud panicked (a bug; the process is fine): {}",
                edgecloud_core::panic_payload::message(&*payload)
            ),
        ),
    };
    // SAFETY: as above.
    unsafe { put(error, Some(failure.message)) };
    failure.status
}

/// A C string argument as UTF-8.
///
/// # Safety
/// `p` is NULL or a NUL-terminated string valid for the call.
pub(super) unsafe fn str_arg<'a>(p: *const c_char, name: &str) -> Result<&'a str, Failure> {
    if p.is_null() {
        return Err(Failure::argument(format!("`{name}` is NULL")));
    }
    // SAFETY: the caller's contract.
    unsafe { CStr::from_ptr(p) }
        .to_str()
        .map_err(|e| Failure::argument(format!("`{name}` is not UTF-8: {e}")))
}

/// A string handed to C (freed with `ec_string_free`). A NUL inside
/// (only possible in a message) is written as `\0`.
pub(super) fn c_string(s: String) -> CString {
    CString::new(s).unwrap_or_else(|e| {
        let text = String::from_utf8_lossy(&e.into_vec()).replace('\0', "\\0");
        CString::new(text).expect("every NUL was replaced")
    })
}

/// Writes `s` (or NULL) to `*out` when `out` is not NULL.
///
/// # Safety
/// `out` is NULL or points to writable storage for one pointer.
pub(super) unsafe fn put(out: *mut *mut c_char, s: Option<String>) {
    if out.is_null() {
        return;
    }
    let p = s.map_or(std::ptr::null_mut(), |s| c_string(s).into_raw());
    // SAFETY: the caller's contract.
    unsafe { *out = p };
}
