//! SHA-256 fingerprints of files (model files in reports). The hashing is
//! the `sha2` crate's, which uses the CPU's SHA instructions where present:
//! that matters for multi-gigabyte model files. Identifies files; nothing
//! security-relevant.

use sha2::{Digest, Sha256};
use std::io::Read;

/// The SHA-256 of everything `reader` yields, as lower-case hex.
pub(crate) fn sha256_reader(mut reader: impl Read) -> std::io::Result<String> {
    let mut hasher = Sha256::new();
    std::io::copy(&mut reader, &mut hasher)?;
    Ok(format!("{:x}", hasher.finalize()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn standard_vectors() {
        let digest = |data: &[u8]| sha256_reader(data).unwrap();
        assert_eq!(
            digest(b""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(
            digest(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
