//! A minimal streaming GGUF v3 writer: header, metadata, tensor table, then
//! tensor data produced on demand, so a large model is never held in memory.
//! It writes what it is given; choosing names and shapes is the caller's job.

use std::io::{self, Write};

use super::format::{pad_to, GgmlType, ValueType, MAGIC, VERSION};

/// One metadata value the writer can emit (only the kinds the generator uses).
#[derive(Debug, Clone)]
pub(crate) enum Value {
    U32(u32),
    U64(u64),
    F32(f32),
    Bool(bool),
    Str(String),
    StrArray(Vec<String>),
    F32Array(Vec<f32>),
    I32Array(Vec<i32>),
}

/// One tensor's table entry: name, dims (ggml order: `dims[0]` is the row
/// length) and type.
#[derive(Debug, Clone)]
pub(crate) struct TensorSpec {
    pub(crate) name: String,
    pub(crate) dims: Vec<u64>,
    pub(crate) ty: GgmlType,
}

impl TensorSpec {
    /// Bytes of data; the caller guarantees `dims[0]` is a multiple of the
    /// type's block size.
    pub(crate) fn nbytes(&self) -> u64 {
        let elements: u64 = self.dims.iter().product();
        elements / self.ty.block * self.ty.bytes
    }
}

/// Writes a whole GGUF file to `out`. `fill(i, w)` must write exactly
/// `tensors[i].nbytes()` bytes of data for tensor `i`; the writer checks
/// that and adds the alignment padding itself.
pub(crate) fn write_gguf<W: Write>(
    out: &mut W,
    metadata: &[(&str, Value)],
    tensors: &[TensorSpec],
    alignment: u64,
    mut fill: impl FnMut(usize, &mut dyn Write) -> io::Result<()>,
) -> io::Result<()> {
    let mut w = Counting { inner: out, n: 0 };
    w.write_all(&MAGIC)?;
    w.write_all(&VERSION.to_le_bytes())?;
    w.write_all(&(tensors.len() as u64).to_le_bytes())?;
    w.write_all(&(metadata.len() as u64).to_le_bytes())?;
    for (key, value) in metadata {
        write_str(&mut w, key)?;
        write_value(&mut w, value)?;
    }
    let mut offset = 0u64;
    for t in tensors {
        write_str(&mut w, &t.name)?;
        w.write_all(&(t.dims.len() as u32).to_le_bytes())?;
        for d in &t.dims {
            w.write_all(&d.to_le_bytes())?;
        }
        w.write_all(&t.ty.id.to_le_bytes())?;
        w.write_all(&offset.to_le_bytes())?;
        offset = pad_to(offset + t.nbytes(), alignment).expect("generated tensors are small");
    }
    pad(&mut w, alignment)?;
    for (i, t) in tensors.iter().enumerate() {
        let start = w.n;
        fill(i, &mut w)?;
        let written = w.n - start;
        if written != t.nbytes() {
            return Err(io::Error::other(format!(
                "tensor '{}': wrote {written} bytes, expected {}",
                t.name,
                t.nbytes()
            )));
        }
        pad(&mut w, alignment)?;
    }
    w.flush()
}

fn pad(w: &mut Counting<'_, impl Write>, alignment: u64) -> io::Result<()> {
    let target = pad_to(w.n, alignment).expect("file offsets fit in u64");
    const ZEROS: [u8; 64] = [0; 64];
    let mut left = target - w.n;
    while left > 0 {
        let n = left.min(ZEROS.len() as u64) as usize;
        w.write_all(&ZEROS[..n])?;
        left -= n as u64;
    }
    Ok(())
}

fn write_str(w: &mut impl Write, s: &str) -> io::Result<()> {
    w.write_all(&(s.len() as u64).to_le_bytes())?;
    w.write_all(s.as_bytes())
}

fn write_value(w: &mut impl Write, value: &Value) -> io::Result<()> {
    let tag = |t: ValueType| t.tag().to_le_bytes();
    match value {
        Value::U32(v) => {
            w.write_all(&tag(ValueType::U32))?;
            w.write_all(&v.to_le_bytes())
        }
        Value::U64(v) => {
            w.write_all(&tag(ValueType::U64))?;
            w.write_all(&v.to_le_bytes())
        }
        Value::F32(v) => {
            w.write_all(&tag(ValueType::F32))?;
            w.write_all(&v.to_le_bytes())
        }
        Value::Bool(v) => {
            w.write_all(&tag(ValueType::Bool))?;
            w.write_all(&[u8::from(*v)])
        }
        Value::Str(s) => {
            w.write_all(&tag(ValueType::String))?;
            write_str(w, s)
        }
        Value::StrArray(items) => {
            w.write_all(&tag(ValueType::Array))?;
            w.write_all(&tag(ValueType::String))?;
            w.write_all(&(items.len() as u64).to_le_bytes())?;
            items.iter().try_for_each(|s| write_str(w, s))
        }
        Value::F32Array(items) => {
            w.write_all(&tag(ValueType::Array))?;
            w.write_all(&tag(ValueType::F32))?;
            w.write_all(&(items.len() as u64).to_le_bytes())?;
            items.iter().try_for_each(|v| w.write_all(&v.to_le_bytes()))
        }
        Value::I32Array(items) => {
            w.write_all(&tag(ValueType::Array))?;
            w.write_all(&tag(ValueType::I32))?;
            w.write_all(&(items.len() as u64).to_le_bytes())?;
            items.iter().try_for_each(|v| w.write_all(&v.to_le_bytes()))
        }
    }
}

/// Counts bytes so padding and per-tensor sizes can be checked.
struct Counting<'a, W: Write> {
    inner: &'a mut W,
    n: u64,
}

impl<W: Write> Write for Counting<'_, W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.n += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}
