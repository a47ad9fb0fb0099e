//! Parses a GGUF file's header, metadata and tensor table with every count
//! and length checked against the bytes actually left in the file before
//! anything is allocated, so a hostile header is an error, never an OOM.
//!
//! It reads the tables only: tensor *data* is never read, only its size is
//! computed (bounds are checked by `validate`). Semantic checks (required
//! keys, tokenizer consistency) live in `validate`, not here.

use std::collections::HashSet;
use std::fs::File;
use std::io::{BufReader, Read};
use std::path::Path;

use super::format::{pad_to, GgmlType, ValueType, DEFAULT_ALIGNMENT, MAX_DIMS, MAX_TENSOR_NAME};
use super::GgufError;

/// llama.cpp's limits on one string and on one array (`GGUF_MAX_STRING_LENGTH`,
/// `GGUF_MAX_ARRAY_ELEMENTS`): files within the file-size bound but over these
/// are still refused by llama.cpp, so we refuse them too.
const MAX_STRING_LEN: u64 = 1 << 30;
const MAX_ARRAY_LEN: u64 = 1 << 30;

/// Limits on the header's counts, far above any real model (the largest
/// have a few thousand tensors and a few dozen keys) yet small enough that
/// nothing sized by them is a problem. A header over them is corrupt.
const MAX_TENSORS: u64 = 1 << 20;
const MAX_KVS: u64 = 1 << 20;

/// Smallest possible encodings, used to bound allocations:
/// a key-value pair is a key length (8), one key byte, a type tag (4) and a
/// one-byte value; a tensor entry is a name length (8), a dimension count
/// (4), a type (4) and an offset (8).
const MIN_KV_BYTES: u64 = 8 + 1 + 4 + 1;
const MIN_TENSOR_INFO_BYTES: u64 = 8 + 4 + 4 + 8;

/// A parsed metadata value.
#[derive(Debug, Clone)]
pub(crate) enum Value {
    /// u8, u16, u32, u64.
    Uint(u64),
    /// i8, i16, i32, i64.
    Int(i64),
    /// f32, f64. (Parsed so every file reads fully; no check needs the
    /// value yet.)
    #[allow(dead_code)]
    Float(f64),
    #[allow(dead_code)]
    Bool(bool),
    Str(String),
    Array(Array),
}

/// An array value. Numbers stay as the file's raw little-endian bytes and
/// strings as one buffer plus end offsets, so memory stays proportional to
/// the bytes really present in the file.
#[derive(Debug, Clone)]
pub(crate) struct Array {
    pub(crate) elem: ValueType,
    pub(crate) len: u64,
    data: ArrayData,
}

#[derive(Debug, Clone)]
enum ArrayData {
    Raw(Vec<u8>),
    Strings { text: String, ends: Vec<usize> },
}

impl Array {
    /// The `i`-th string of a string array.
    pub(crate) fn str_at(&self, i: usize) -> Option<&str> {
        match &self.data {
            ArrayData::Strings { text, ends } => {
                let end = *ends.get(i)?;
                let start = if i == 0 { 0 } else { ends[i - 1] };
                Some(&text[start..end])
            }
            ArrayData::Raw(_) => None,
        }
    }

    /// Iterates an integer array (empty for other arrays).
    pub(crate) fn ints(&self) -> impl Iterator<Item = i64> + '_ {
        let raw: &[u8] = match &self.data {
            ArrayData::Raw(raw) => raw,
            ArrayData::Strings { .. } => &[],
        };
        let elem = self.elem;
        let size = elem.fixed_size().unwrap_or(1) as usize;
        raw.chunks_exact(size).filter_map(move |b| {
            Some(match elem {
                ValueType::U8 => b[0].into(),
                ValueType::I8 => (b[0] as i8).into(),
                ValueType::U16 => u16::from_le_bytes([b[0], b[1]]).into(),
                ValueType::I16 => i16::from_le_bytes([b[0], b[1]]).into(),
                ValueType::U32 => u32::from_le_bytes(b.try_into().ok()?).into(),
                ValueType::I32 => i32::from_le_bytes(b.try_into().ok()?).into(),
                ValueType::U64 => i64::try_from(u64::from_le_bytes(b.try_into().ok()?)).ok()?,
                ValueType::I64 => i64::from_le_bytes(b.try_into().ok()?),
                _ => return None,
            })
        })
    }

    /// Iterates a string array (empty for other arrays).
    pub(crate) fn strings(&self) -> impl Iterator<Item = &str> + '_ {
        let n = match &self.data {
            ArrayData::Strings { ends, .. } => ends.len(),
            ArrayData::Raw(_) => 0,
        };
        (0..n).filter_map(|i| self.str_at(i))
    }
}

impl Value {
    /// A type name for messages: "u32", "string", "array of string"...
    pub(crate) fn type_name(&self, tag: ValueType) -> String {
        match self {
            Value::Array(a) => format!("array of {}", a.elem.name()),
            _ => tag.name().to_string(),
        }
    }

    /// Any integer value that fits in i64.
    pub(crate) fn as_i64(&self) -> Option<i64> {
        match *self {
            Value::Uint(v) => i64::try_from(v).ok(),
            Value::Int(v) => Some(v),
            _ => None,
        }
    }

    pub(crate) fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    pub(crate) fn as_array(&self) -> Option<&Array> {
        match self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }
}

/// One metadata entry.
#[derive(Debug, Clone)]
pub(crate) struct Kv {
    pub(crate) key: String,
    pub(crate) tag: ValueType,
    pub(crate) value: Value,
}

/// One tensor table entry, with sizes already computed and checked.
#[derive(Debug, Clone)]
pub(crate) struct TensorInfo {
    pub(crate) name: String,
    pub(crate) dims: Vec<u64>,
    pub(crate) ty: GgmlType,
    /// Offset relative to the start of the data section.
    pub(crate) offset: u64,
    pub(crate) elements: u64,
    pub(crate) nbytes: u64,
}

/// Everything before the tensor data.
#[derive(Debug, Clone)]
pub(crate) struct Header {
    pub(crate) version: u32,
    pub(crate) file_size: u64,
    pub(crate) metadata: Vec<Kv>,
    pub(crate) tensors: Vec<TensorInfo>,
    pub(crate) alignment: u64,
    /// Absolute offset of the data section (end of tables, padded).
    pub(crate) data_offset: u64,
}

impl Header {
    pub(crate) fn get(&self, key: &str) -> Option<&Kv> {
        self.metadata.iter().find(|kv| kv.key == key)
    }
}

/// Reads and checks the header, metadata and tensor table of `path`.
pub(crate) fn read_header(path: &Path) -> Result<Header, GgufError> {
    let file = File::open(path).map_err(|e| GgufError::io(path, e))?;
    let meta = file.metadata().map_err(|e| GgufError::io(path, e))?;
    if meta.is_dir() {
        return Err(GgufError::IsDirectory {
            path: path.to_path_buf(),
        });
    }
    let file_size = meta.len();
    if file_size == 0 {
        return Err(GgufError::Empty);
    }
    let mut r = Reader {
        inner: BufReader::with_capacity(1 << 16, file),
        pos: 0,
        size: file_size,
        path,
    };
    parse(&mut r)
}

/// Parses a whole file held in memory (for tests that try many variants
/// without touching the disk).
#[cfg(test)]
pub(crate) fn read_header_from_bytes(bytes: &[u8]) -> Result<Header, GgufError> {
    if bytes.is_empty() {
        return Err(GgufError::Empty);
    }
    let mut r = Reader {
        inner: bytes,
        pos: 0,
        size: bytes.len() as u64,
        path: Path::new("<memory>"),
    };
    parse(&mut r)
}

fn parse<R: Read>(r: &mut Reader<'_, R>) -> Result<Header, GgufError> {
    let magic_len = r.size.min(4) as usize;
    let mut magic = vec![0u8; magic_len];
    r.read_exact(&mut magic)?;
    if magic != b"GGUF" {
        return Err(GgufError::BadMagic { found: magic });
    }
    let version = r.u32(|| "version".into())?;
    if !(2..=3).contains(&version) {
        return Err(GgufError::UnsupportedVersion { version });
    }
    let tensor_count = r.count(|| "tensor count".into(), MIN_TENSOR_INFO_BYTES, MAX_TENSORS)?;
    let kv_count = r.count(|| "metadata count".into(), MIN_KV_BYTES, MAX_KVS)?;
    // Reserve no more than the rest of the file could hold; a file that ends
    // early is reported where it ends, by the loops below.
    let kv_capacity = kv_count.min(r.remaining() / MIN_KV_BYTES) as usize;
    let tensor_capacity = tensor_count.min(r.remaining() / MIN_TENSOR_INFO_BYTES) as usize;

    let mut metadata = Vec::with_capacity(kv_capacity);
    let mut seen = HashSet::with_capacity(kv_capacity);
    for i in 0..kv_count {
        let key_offset = r.pos;
        let key = r.string(&|| format!("key of metadata entry #{i}"))?;
        if key.is_empty() {
            return Err(GgufError::InvalidName {
                reason: format!("metadata entry #{i} at offset {key_offset} has an empty key"),
            });
        }
        if !seen.insert(key.clone()) {
            return Err(GgufError::InvalidName {
                reason: format!("duplicate metadata key '{key}' at offset {key_offset}"),
            });
        }
        let (tag, value) = r.value(&key)?;
        metadata.push(Kv { key, tag, value });
    }

    let alignment = match metadata.iter().find(|kv| kv.key == "general.alignment") {
        None => DEFAULT_ALIGNMENT,
        Some(Kv {
            value: Value::Uint(a),
            tag: ValueType::U32,
            ..
        }) => *a,
        Some(kv) => {
            return Err(GgufError::WrongValueType {
                key: kv.key.clone(),
                expected: "u32",
                found: kv.value.type_name(kv.tag),
            })
        }
    };
    if !alignment.is_power_of_two() {
        return Err(GgufError::BadAlignment { alignment });
    }

    let mut tensors = Vec::with_capacity(tensor_capacity);
    let mut names = HashSet::with_capacity(tensor_capacity);
    for i in 0..tensor_count {
        let name_offset = r.pos;
        let name = r.string(&|| format!("name of tensor #{i}"))?;
        if name.is_empty() || name.len() > MAX_TENSOR_NAME {
            return Err(GgufError::InvalidName {
                reason: format!(
                    "tensor #{i} at offset {name_offset} has a name of {} bytes (must be 1 to {MAX_TENSOR_NAME})",
                    name.len()
                ),
            });
        }
        if !names.insert(name.clone()) {
            return Err(GgufError::InvalidName {
                reason: format!("duplicate tensor name '{name}' at offset {name_offset}"),
            });
        }
        tensors.push(r.tensor_info(name)?);
    }

    let data_offset = if tensors.is_empty() {
        r.pos
    } else {
        pad_to(r.pos, alignment).expect("table end is within the file")
    };
    Ok(Header {
        version,
        file_size: r.size,
        metadata,
        tensors,
        alignment,
        data_offset,
    })
}

/// A reader that knows its position and the file size, and checks every
/// read against what is left.
struct Reader<'p, R> {
    inner: R,
    pos: u64,
    size: u64,
    path: &'p Path,
}

impl<R: Read> Reader<'_, R> {
    fn remaining(&self) -> u64 {
        self.size - self.pos
    }

    fn read_exact(&mut self, buf: &mut [u8]) -> Result<(), GgufError> {
        self.inner
            .read_exact(buf)
            .map_err(|e| GgufError::io(self.path, e))?;
        self.pos += buf.len() as u64;
        Ok(())
    }

    fn fixed<const N: usize>(
        &mut self,
        what: impl FnOnce() -> String,
    ) -> Result<[u8; N], GgufError> {
        if (N as u64) > self.remaining() {
            return Err(GgufError::Truncated {
                what: what(),
                offset: self.pos,
                needed: N as u64,
                file_size: self.size,
            });
        }
        let mut buf = [0u8; N];
        self.read_exact(&mut buf)?;
        Ok(buf)
    }

    fn u32(&mut self, what: impl FnOnce() -> String) -> Result<u32, GgufError> {
        self.fixed::<4>(what).map(u32::from_le_bytes)
    }

    fn u64(&mut self, what: impl FnOnce() -> String) -> Result<u64, GgufError> {
        self.fixed::<8>(what).map(u64::from_le_bytes)
    }

    /// Reads a count of entries of at least `min_size` bytes each. A count
    /// over `limit` is [`GgufError::CountTooLarge`]; one that merely runs
    /// past the end of the file is left for the caller to report precisely
    /// as [`GgufError::Truncated`].
    fn count(
        &mut self,
        what: impl Fn() -> String,
        min_size: u64,
        limit: u64,
    ) -> Result<u64, GgufError> {
        let offset = self.pos;
        let count = self.u64(&what)?;
        if count > limit {
            return Err(GgufError::CountTooLarge {
                what: what(),
                offset,
                count,
                max: limit.min(self.remaining() / min_size),
            });
        }
        Ok(count)
    }

    /// Fails with [`GgufError::Truncated`] unless `needed` bytes are left.
    fn need(&self, needed: u64, what: impl FnOnce() -> String) -> Result<(), GgufError> {
        if needed > self.remaining() {
            return Err(GgufError::Truncated {
                what: what(),
                offset: self.pos,
                needed,
                file_size: self.size,
            });
        }
        Ok(())
    }

    fn string(&mut self, what: &dyn Fn() -> String) -> Result<String, GgufError> {
        let len = self.count(|| format!("length of {}", what()), 1, MAX_STRING_LEN)?;
        self.need(len, || format!("{} ({len} bytes)", what()))?;
        let start = self.pos;
        let mut bytes = vec![0u8; len as usize];
        self.read_exact(&mut bytes)?;
        String::from_utf8(bytes).map_err(|_| GgufError::InvalidUtf8 {
            what: what(),
            offset: start,
        })
    }

    fn value(&mut self, key: &str) -> Result<(ValueType, Value), GgufError> {
        let tag_offset = self.pos;
        let tag_id = self.u32(|| format!("value type of key '{key}'"))?;
        let tag = ValueType::from_u32(tag_id).ok_or_else(|| GgufError::UnknownValueType {
            key: key.to_string(),
            type_id: tag_id,
            offset: tag_offset,
        })?;
        let value = if tag == ValueType::Array {
            Value::Array(self.array(key)?)
        } else {
            self.scalar(tag, &|| format!("value of key '{key}'"))?
        };
        Ok((tag, value))
    }

    fn scalar(&mut self, tag: ValueType, what: &dyn Fn() -> String) -> Result<Value, GgufError> {
        Ok(match tag {
            ValueType::U8 => Value::Uint(self.fixed::<1>(what)?[0].into()),
            ValueType::I8 => Value::Int((self.fixed::<1>(what)?[0] as i8).into()),
            ValueType::U16 => Value::Uint(u16::from_le_bytes(self.fixed(what)?).into()),
            ValueType::I16 => Value::Int(i16::from_le_bytes(self.fixed(what)?).into()),
            ValueType::U32 => Value::Uint(u32::from_le_bytes(self.fixed(what)?).into()),
            ValueType::I32 => Value::Int(i32::from_le_bytes(self.fixed(what)?).into()),
            ValueType::U64 => Value::Uint(u64::from_le_bytes(self.fixed(what)?)),
            ValueType::I64 => Value::Int(i64::from_le_bytes(self.fixed(what)?)),
            ValueType::F32 => Value::Float(f32::from_le_bytes(self.fixed(what)?).into()),
            ValueType::F64 => Value::Float(f64::from_le_bytes(self.fixed(what)?)),
            ValueType::Bool => Value::Bool(self.fixed::<1>(what)?[0] != 0),
            ValueType::String => Value::Str(self.string(what)?),
            ValueType::Array => unreachable!("arrays are read by `array`"),
        })
    }

    fn array(&mut self, key: &str) -> Result<Array, GgufError> {
        let tag_offset = self.pos;
        let tag_id = self.u32(|| format!("element type of array '{key}'"))?;
        let elem = ValueType::from_u32(tag_id)
            .filter(|t| *t != ValueType::Array)
            .ok_or_else(|| GgufError::UnknownValueType {
                key: key.to_string(),
                type_id: tag_id,
                offset: tag_offset,
            })?;
        // Strings take at least their 8-byte length each.
        let min_size = elem.fixed_size().unwrap_or(8);
        let len = self.count(
            || format!("length of array '{key}'"),
            min_size,
            MAX_ARRAY_LEN,
        )?;
        let data = match elem.fixed_size() {
            Some(size) => {
                // len <= 2^30 and size <= 8: no overflow; the allocation is
                // bounded by the bytes really left in the file.
                let needed = len * size;
                self.need(needed, || {
                    format!("array '{key}' ({len} values of type {})", elem.name())
                })?;
                let mut raw = vec![0u8; needed as usize];
                self.read_exact(&mut raw)?;
                ArrayData::Raw(raw)
            }
            None => {
                // Each string takes at least 8 bytes: never reserve more
                // than the rest of the file could hold.
                let mut text = String::new();
                let mut ends = Vec::with_capacity(len.min(self.remaining() / 8) as usize);
                for i in 0..len {
                    let s = self.string(&|| format!("element {i} of array '{key}'"))?;
                    text.push_str(&s);
                    ends.push(text.len());
                }
                ArrayData::Strings { text, ends }
            }
        };
        Ok(Array { elem, len, data })
    }

    fn tensor_info(&mut self, name: String) -> Result<TensorInfo, GgufError> {
        let bad_shape = |reason: String| GgufError::BadTensorShape {
            tensor: name.clone(),
            reason,
        };
        let n_dims = self.u32(|| format!("dimension count of tensor '{name}'"))?;
        if n_dims > MAX_DIMS {
            return Err(bad_shape(format!(
                "{n_dims} dimensions (at most {MAX_DIMS})"
            )));
        }
        let mut dims = Vec::with_capacity(n_dims as usize);
        for d in 0..n_dims {
            let v = self.u64(|| format!("dimension {d} of tensor '{name}'"))?;
            if v > i64::MAX as u64 {
                return Err(bad_shape(format!(
                    "dimension {d} is negative ({})",
                    v as i64
                )));
            }
            dims.push(v);
        }
        let elements = dims
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d))
            .filter(|&n| n <= i64::MAX as u64)
            .ok_or_else(|| bad_shape(format!("{dims:?} overflows the element count")))?;
        let type_id = self.u32(|| format!("type of tensor '{name}'"))?;
        let ty = GgmlType::from_id(type_id).ok_or_else(|| GgufError::UnknownTensorType {
            tensor: name.clone(),
            type_id,
        })?;
        let row = dims.first().copied().unwrap_or(1);
        if row % ty.block != 0 {
            return Err(bad_shape(format!(
                "rows of {row} elements are not a multiple of the {} block size {}",
                ty.name, ty.block
            )));
        }
        let nbytes = (elements / ty.block)
            .checked_mul(ty.bytes)
            .ok_or_else(|| bad_shape(format!("{dims:?} of {} overflows the byte size", ty.name)))?;
        let offset = self.u64(|| format!("data offset of tensor '{name}'"))?;
        Ok(TensorInfo {
            name,
            dims,
            ty,
            offset,
            elements,
            nbytes,
        })
    }
}
