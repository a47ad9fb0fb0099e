//! Serde helpers that write durations as fractional milliseconds, the unit
//! every report and JSON outcome uses. Plain conversions; nothing else.

use serde::{Deserialize, Deserializer, Serializer};
use std::time::Duration;

/// A duration in milliseconds, as a float (sub-millisecond figures matter for
/// overshoot and callback times).
pub(crate) fn to_ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn from_ms(ms: f64) -> Duration {
    if ms.is_finite() && ms > 0.0 {
        Duration::from_secs_f64(ms / 1000.0)
    } else {
        Duration::ZERO
    }
}

pub(crate) mod required {
    use super::*;

    pub(crate) fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(to_ms(*d))
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        Ok(from_ms(f64::deserialize(d)?))
    }
}

pub(crate) mod optional {
    use super::*;

    pub(crate) fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_some(&to_ms(*d)),
            None => s.serialize_none(),
        }
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Duration>, D::Error> {
        Ok(Option::<f64>::deserialize(d)?.map(from_ms))
    }
}
