//! Integration tests: generated models, and a catalogue of malformed GGUF
//! files that must each produce their own typed error.

use crate::support::models;

#[test]
fn tiny_model_is_generated_once_and_small() {
    let a = models::tiny_model();
    let b = models::tiny_model();
    assert_eq!(a, b);
    let len = std::fs::metadata(a).unwrap().len();
    assert!(len > 0 && len < 1_000_000, "tiny model is {len} bytes");
}
