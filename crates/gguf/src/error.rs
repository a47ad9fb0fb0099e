//! The one error type of the `gguf` module. Each variant names one problem a
//! caller can act on, and says where it is (byte offset, key, tensor).

use std::path::PathBuf;

/// Why a GGUF file could not be read, validated or written.
///
/// Messages name the problem and where it is: a byte offset, a metadata key
/// or a tensor name. They never include file contents beyond short names.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GgufError {
    /// The path does not exist.
    #[error("{}: no such file", path.display())]
    NotFound {
        /// The path that was asked for.
        path: PathBuf,
    },
    /// The path is a directory.
    #[error("{}: is a directory, not a GGUF file", path.display())]
    IsDirectory {
        /// The path that was asked for.
        path: PathBuf,
    },
    /// The operating system refused a read or write (permissions, disk full...).
    #[error("I/O error on {}", path.display())]
    Io {
        /// The file being read or written.
        path: PathBuf,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
    /// The file has no bytes at all.
    #[error("file is empty")]
    Empty,
    /// The first four bytes are not `GGUF` (or the file is shorter than four bytes).
    #[error("bad magic {found:02x?} at offset 0: not a GGUF file (expected \"GGUF\")")]
    BadMagic {
        /// The bytes found (fewer than four when the file is that short).
        found: Vec<u8>,
    },
    /// A GGUF version this reader does not support (it accepts 2 and 3).
    #[error("unsupported GGUF version {version} (supported: 2 and 3)")]
    UnsupportedVersion {
        /// The version in the header.
        version: u32,
    },
    /// The file ends in the middle of a structure.
    #[error("truncated file: {what} at offset {offset} needs {needed} bytes, but the file is {file_size} bytes")]
    Truncated {
        /// What was being read ("tensor count", "value of key 'x'", ...).
        what: String,
        /// Where it starts.
        offset: u64,
        /// How many bytes it needs.
        needed: u64,
        /// The file's size.
        file_size: u64,
    },
    /// A count or length is beyond any sane bound (and llama.cpp's limits):
    /// a corrupt or hostile header. Nothing was allocated for it.
    #[error("{what} at offset {offset} is {count}, more than the {max} this file could hold (corrupt header)")]
    CountTooLarge {
        /// What the count is ("tensor count", "length of array 'x'", ...).
        what: String,
        /// Where the count is stored.
        offset: u64,
        /// The claimed count.
        count: u64,
        /// The most this file could hold.
        max: u64,
    },
    /// A metadata value has a type tag GGUF does not define (or an array of arrays).
    #[error("key '{key}' at offset {offset} has unknown value type {type_id}")]
    UnknownValueType {
        /// The key.
        key: String,
        /// The bad tag.
        type_id: u32,
        /// Where the tag is.
        offset: u64,
    },
    /// A string (key, value, or tensor name) is not valid UTF-8.
    #[error("{what} at offset {offset} is not valid UTF-8")]
    InvalidUtf8 {
        /// Which string.
        what: String,
        /// Where the string's bytes start.
        offset: u64,
    },
    /// A metadata key is empty or appears twice, or a tensor name is empty,
    /// too long or repeated: llama.cpp refuses all of these.
    #[error("invalid name: {reason}")]
    InvalidName {
        /// What is wrong and where.
        reason: String,
    },
    /// A metadata key holds a value of the wrong type (e.g. a string where
    /// llama.cpp expects an integer).
    #[error("key '{key}' has type {found}, expected {expected}")]
    WrongValueType {
        /// The key.
        key: String,
        /// The type llama.cpp expects.
        expected: &'static str,
        /// The type found.
        found: String,
    },
    /// `general.alignment` is zero or not a power of two.
    #[error("general.alignment is {alignment}, which is not a power of two")]
    BadAlignment {
        /// The value found.
        alignment: u64,
    },
    /// A tensor has a ggml type id ggml does not know (or one it removed).
    #[error("tensor '{tensor}' has unknown ggml type {type_id}")]
    UnknownTensorType {
        /// The tensor.
        tensor: String,
        /// The bad type id.
        type_id: u32,
    },
    /// A tensor's shape is invalid: too many dimensions, element count
    /// overflowing, or rows not a multiple of the type's block size.
    #[error("tensor '{tensor}' has an invalid shape: {reason}")]
    BadTensorShape {
        /// The tensor.
        tensor: String,
        /// What is wrong.
        reason: String,
    },
    /// A tensor's data lies (partly) past the end of the file.
    #[error("tensor '{tensor}' data [{start}, {end}) lies outside the file ({file_size} bytes)")]
    TensorOutOfBounds {
        /// The tensor.
        tensor: String,
        /// Absolute start offset of its data.
        start: u64,
        /// Absolute end offset (exclusive), saturated on overflow.
        end: u64,
        /// The file's size.
        file_size: u64,
    },
    /// A tensor's data offset is not a multiple of the file's alignment.
    #[error("tensor '{tensor}' data offset {offset} is not aligned to {alignment} bytes")]
    TensorMisaligned {
        /// The tensor.
        tensor: String,
        /// Its offset relative to the data section.
        offset: u64,
        /// The required alignment.
        alignment: u64,
    },
    /// Two tensors' data ranges overlap.
    #[error("tensor '{tensor}' data overlaps tensor '{other}'")]
    TensorOverlap {
        /// The later tensor.
        tensor: String,
        /// The tensor it overlaps.
        other: String,
    },
    /// Tensor data is not laid out the way llama.cpp requires: each tensor
    /// starting where the previous one ended (padded to the alignment), in
    /// table order.
    #[error("tensor '{tensor}' data offset is {found}, llama.cpp requires {expected} (tensors must be packed in table order)")]
    TensorLayout {
        /// The tensor.
        tensor: String,
        /// Its offset relative to the data section.
        found: u64,
        /// The offset llama.cpp computes.
        expected: u64,
    },
    /// A tensor the architecture needs is missing, has the wrong shape, or
    /// should not be there (checked for the llama architecture only).
    #[error("tensor '{tensor}' does not fit the {architecture} architecture: {reason}")]
    TensorMismatch {
        /// The tensor.
        tensor: String,
        /// The architecture it was checked against.
        architecture: String,
        /// What is wrong ("missing", "shape [64, 32], expected [64, 64]"...).
        reason: String,
    },
    /// A hyperparameter has a value llama.cpp refuses.
    #[error("'{key}' {reason}")]
    BadHyperparameter {
        /// The key.
        key: String,
        /// What is wrong with its value.
        reason: String,
    },
    /// A key llama.cpp needs is missing.
    #[error("required key '{key}' is missing")]
    MissingKey {
        /// The key.
        key: String,
    },
    /// Tokenizer arrays disagree in length (tokens vs scores vs token types).
    #[error("tokenizer array '{key}' has {len} entries but there are {tokens} tokens")]
    TokenizerLengthMismatch {
        /// The array that disagrees with `tokenizer.ggml.tokens`.
        key: String,
        /// Its length.
        len: u64,
        /// The number of tokens.
        tokens: u64,
    },
    /// Two tokens have the same text; llama.cpp aborts the whole process on
    /// such a vocabulary.
    #[error("duplicate token {token:?} at ids {first} and {second} (llama.cpp aborts the process on duplicate tokens)")]
    DuplicateToken {
        /// The repeated text (shortened when long).
        token: String,
        /// Its first id.
        first: u64,
        /// Its second id.
        second: u64,
    },
    /// A special-token id (bos, eos, ...) is not a valid token id.
    #[error("'{key}' is {id}, outside the vocabulary of {vocab_size} tokens")]
    TokenIdOutOfRange {
        /// The key holding the id.
        key: String,
        /// The id.
        id: i64,
        /// The number of tokens.
        vocab_size: u64,
    },
    /// `<arch>.context_length` is 0: the load looks fine, then llama.cpp
    /// sizes its batch from it and aborts on the first request
    /// (`GGML_ASSERT(n_tokens_all <= n_batch)`).
    #[error(
        "'{key}' is 0: llama.cpp would size every batch to 0 tokens and abort on the first request"
    )]
    ZeroContextLength {
        /// The key.
        key: String,
    },
    /// `<arch>.block_count` (or a count of layers tied to it) is out of the
    /// range llama.cpp asserts on at load.
    #[error("'{key}' is {count}: {reason}")]
    BadLayerCount {
        /// The key.
        key: String,
        /// The value found.
        count: u64,
        /// The range llama.cpp requires.
        reason: String,
    },
    /// Expert counts that contradict each other (llama.cpp asserts on them
    /// at load).
    #[error("mixture-of-experts keys disagree: {reason}")]
    InconsistentExperts {
        /// Which keys and values disagree.
        reason: String,
    },
    /// The KV head count is 0 or does not divide the head count: grouped
    /// attention cannot share KV heads evenly and llama.cpp aborts in
    /// `ggml_can_mul_mat` when it builds the first graph.
    #[error("{layer_note}{heads} attention heads and {kv_heads} KV heads: {reason}")]
    HeadCountMismatch {
        /// Heads (`<arch>.attention.head_count`).
        heads: u64,
        /// KV heads (`<arch>.attention.head_count_kv`).
        kv_heads: u64,
        /// "layer N: " when the counts are per layer, else empty.
        layer_note: String,
        /// What llama.cpp needs.
        reason: String,
    },
    /// Key and value head sizes differ where the architecture's graph
    /// asserts they are equal.
    #[error("attention key head size {key_length} differs from value head size {value_length}; llama.cpp's {architecture} graph asserts they are equal")]
    HeadSizeMismatch {
        /// The architecture.
        architecture: String,
        /// Key head size.
        key_length: u64,
        /// Value head size.
        value_length: u64,
    },
    /// `<arch>.rope.scaling.type` names a scaling llama.cpp does not know
    /// (it asserts at load).
    #[error("'{key}' is {value:?}; llama.cpp knows only \"none\", \"linear\", \"yarn\" and \"longrope\"")]
    UnknownRopeScaling {
        /// The key.
        key: String,
        /// The value found (shortened when long).
        value: String,
    },
    /// A normalisation epsilon that is NaN, infinite or negative: llama.cpp
    /// asserts `eps >= 0` at the first compute (NaN fails it too).
    #[error("'{key}' is {}; a norm epsilon must be finite and not negative", short_float(*value))]
    BadNormEpsilon {
        /// The key.
        key: String,
        /// The value found.
        value: f64,
    },
    /// A tensor is stored in a type llama.cpp cannot compute with in its
    /// role: a matrix weight in a type without a matrix-multiply kernel
    /// (I8, I32, Q8_K, ... crash in `mul_mat`), or a norm or bias vector
    /// that is not F32 (llama.cpp aborts in the elementwise op).
    #[error("tensor '{tensor}' is stored as {ty}, which llama.cpp cannot use for a {role} (expected {expected})")]
    UnsupportedTensorType {
        /// The tensor.
        tensor: String,
        /// Its ggml type.
        ty: String,
        /// What the tensor is for ("matrix weight", "norm or bias vector").
        role: &'static str,
        /// The types that work in that role.
        expected: &'static str,
    },
    /// `tokenizer.ggml.model` names a tokenizer llama.cpp does not know.
    #[error("unknown tokenizer model {model:?} in tokenizer.ggml.model")]
    UnknownTokenizer {
        /// The value found (shortened when long).
        model: String,
    },
    /// `tokenizer.ggml.model` is `no_vocab` or `none`: llama.cpp loads the
    /// model without a tokenizer and aborts on the first tokenization, so
    /// such a model cannot answer a chat request.
    #[error("tokenizer.ggml.model is {model:?}: the model has no vocabulary, and llama.cpp aborts on the first tokenization")]
    NoVocabulary {
        /// The value found.
        model: String,
    },
    /// A tokenizer key has a value llama.cpp cannot use (unknown tokenizer,
    /// missing merges, ...).
    #[error("tokenizer: {reason}")]
    BadTokenizer {
        /// What is wrong.
        reason: String,
    },
}

impl GgufError {
    /// A stable snake_case name for the variant, for machine-readable output
    /// (`edgecloud model inspect --json` prints it as `error_kind`).
    pub fn kind(&self) -> &'static str {
        match self {
            Self::NotFound { .. } => "not_found",
            Self::IsDirectory { .. } => "is_directory",
            Self::Io { .. } => "io",
            Self::Empty => "empty",
            Self::BadMagic { .. } => "bad_magic",
            Self::UnsupportedVersion { .. } => "unsupported_version",
            Self::Truncated { .. } => "truncated",
            Self::CountTooLarge { .. } => "count_too_large",
            Self::UnknownValueType { .. } => "unknown_value_type",
            Self::InvalidUtf8 { .. } => "invalid_utf8",
            Self::InvalidName { .. } => "invalid_name",
            Self::WrongValueType { .. } => "wrong_value_type",
            Self::BadAlignment { .. } => "bad_alignment",
            Self::UnknownTensorType { .. } => "unknown_tensor_type",
            Self::BadTensorShape { .. } => "bad_tensor_shape",
            Self::TensorOutOfBounds { .. } => "tensor_out_of_bounds",
            Self::TensorMisaligned { .. } => "tensor_misaligned",
            Self::TensorOverlap { .. } => "tensor_overlap",
            Self::TensorLayout { .. } => "tensor_layout",
            Self::TensorMismatch { .. } => "tensor_mismatch",
            Self::BadHyperparameter { .. } => "bad_hyperparameter",
            Self::MissingKey { .. } => "missing_key",
            Self::TokenizerLengthMismatch { .. } => "tokenizer_length_mismatch",
            Self::DuplicateToken { .. } => "duplicate_token",
            Self::TokenIdOutOfRange { .. } => "token_id_out_of_range",
            Self::BadTokenizer { .. } => "bad_tokenizer",
            Self::ZeroContextLength { .. } => "zero_context_length",
            Self::BadLayerCount { .. } => "bad_layer_count",
            Self::InconsistentExperts { .. } => "inconsistent_experts",
            Self::HeadCountMismatch { .. } => "head_count_mismatch",
            Self::HeadSizeMismatch { .. } => "head_size_mismatch",
            Self::UnknownRopeScaling { .. } => "unknown_rope_scaling",
            Self::BadNormEpsilon { .. } => "bad_norm_epsilon",
            Self::UnsupportedTensorType { .. } => "unsupported_tensor_type",
            Self::UnknownTokenizer { .. } => "unknown_tokenizer",
            Self::NoVocabulary { .. } => "no_vocabulary",
        }
    }

    /// Builds [`GgufError::NotFound`], [`GgufError::IsDirectory`] or
    /// [`GgufError::Io`] from an I/O error on `path`.
    pub(crate) fn io(path: &std::path::Path, source: std::io::Error) -> Self {
        if source.kind() == std::io::ErrorKind::NotFound {
            Self::NotFound {
                path: path.to_path_buf(),
            }
        } else if path.is_dir() {
            Self::IsDirectory {
                path: path.to_path_buf(),
            }
        } else {
            Self::Io {
                path: path.to_path_buf(),
                source,
            }
        }
    }
}

/// A file's text (a token, a model name) as it goes into an error: token
/// texts can be long or full of control characters, so messages keep the
/// first 64 characters.
pub(super) fn shorten(s: &str) -> String {
    const MAX: usize = 64;
    match s.char_indices().nth(MAX) {
        None => s.to_string(),
        Some((cut, _)) => format!("{}...", &s[..cut]),
    }
}

/// A float as short as it reads back: an f32 from the file shows as
/// `-0.00001`, not as its f64 widening `-0.000009999999747378752`.
fn short_float(v: f64) -> String {
    let narrow = v as f32;
    if f64::from(narrow) == v || v.is_nan() {
        narrow.to_string()
    } else {
        v.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shorten_keeps_messages_short() {
        assert_eq!(shorten("abc"), "abc");
        let long = "é".repeat(100);
        assert_eq!(shorten(&long).chars().count(), 67);
    }
}
