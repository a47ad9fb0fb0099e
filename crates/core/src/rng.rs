//! The crate's one seeded pseudo-random generator (SplitMix64): a fixed,
//! portable sequence for whatever must be the same on every machine (the
//! generated GGUF weights, the built-in bench workloads) and a cheap source
//! of jitter (the cloud lane's cooldowns, seeded from the OS). It must not
//! be used where unpredictability matters: it is not cryptographic.

/// SplitMix64 (Steele, Lea and Flood): one 64-bit state, one add and two
/// multiplies per value, and every seed (0 included) gives a full-period
/// sequence, so callers may seed it with anything.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

/// SplitMix64's increment (the golden ratio in 64 bits); also a good
/// multiplier for deriving independent seeds from one (`seed ^ i * GAMMA`).
pub const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

impl SplitMix64 {
    /// A generator whose sequence depends only on `seed`.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The next value.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(GAMMA);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sequence_is_splitmix64() {
        // The reference values of SplitMix64 seeded with 0 and 1: the
        // generated models and built-in workloads depend on them.
        let mut r = SplitMix64::new(0);
        assert_eq!(r.next_u64(), 0xE220_A839_7B1D_CDAF);
        assert_eq!(r.next_u64(), 0x6E78_9E6A_A1B9_65F4);
        let mut r = SplitMix64::new(1);
        assert_eq!(r.next_u64(), 0x910A_2DEC_8902_5CC1);
    }
}
