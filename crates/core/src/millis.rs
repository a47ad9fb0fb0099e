//! Durations as milliseconds: the unit every report, JSON outcome and CLI
//! figure uses. Plain conversions and the serde helpers built on them;
//! nothing else.

use serde::{Deserialize, Deserializer, Serializer};
use std::time::Duration;

/// A duration in milliseconds, as a float (sub-millisecond figures matter for
/// overshoot and callback times).
pub fn to_ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// A duration in milliseconds rounded to the microsecond, for printing.
pub fn to_ms_rounded(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e3
}

/// Milliseconds back to a duration; negative, NaN or infinite read as zero
/// (a report from elsewhere must not make us panic).
pub fn from_ms(ms: f64) -> Duration {
    if ms.is_finite() && ms > 0.0 {
        Duration::from_secs_f64(ms / 1000.0)
    } else {
        Duration::ZERO
    }
}

/// `#[serde(with = "crate::millis::required")]` for a `Duration` field.
pub mod required {
    use super::*;

    /// Writes the duration as milliseconds.
    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(to_ms(*d))
    }

    /// Reads milliseconds into a duration.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        Ok(from_ms(f64::deserialize(d)?))
    }
}

/// `#[serde(with = "crate::millis::optional")]` for an `Option<Duration>`.
pub mod optional {
    use super::*;

    /// Writes the duration, if any, as milliseconds.
    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_some(&to_ms(*d)),
            None => s.serialize_none(),
        }
    }

    /// Reads optional milliseconds into a duration.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        Ok(Option::<f64>::deserialize(d)?.map(from_ms))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_nonsense() {
        assert_eq!(to_ms(Duration::from_micros(1500)), 1.5);
        assert_eq!(to_ms_rounded(Duration::from_nanos(1_234_567)), 1.235);
        assert_eq!(from_ms(2.5), Duration::from_micros(2500));
        assert_eq!(from_ms(-1.0), Duration::ZERO);
        assert_eq!(from_ms(f64::NAN), Duration::ZERO);
    }
}
