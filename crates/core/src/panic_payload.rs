//! The text of a caught panic, for reports and logs. One helper, shared by
//! every place that catches a panic (backends, callbacks, observers, the
//! llama.cpp worker).

/// The message a panic carried, or a fixed phrase when it carried none.
pub fn message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic with a non-string payload".to_string()
    }
}
