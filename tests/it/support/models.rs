//! Generated GGUF models for the integration tests: each is written once per
//! test process into a private temporary directory, and helpers to write
//! arbitrary (malformed) bytes to fresh files.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use edgecloud::gguf::{write_model, Preset};

/// The seed every shared test model is generated with.
pub const SEED: u64 = 42;

const SCRATCH_PREFIX: &str = "edgecloud-test-";

/// This process's scratch directory (created on first use). Several test
/// processes may run at once, so the directory is keyed by process id.
/// Nothing runs at process exit, so each process first removes the
/// directories of earlier test processes that are gone (where `/proc`
/// tells), which keeps the 145 MB bench model from piling up.
pub fn scratch_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        remove_stale_scratch_dirs();
        let dir = std::env::temp_dir().join(format!("{SCRATCH_PREFIX}{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir is writable");
        dir
    })
}

fn remove_stale_scratch_dirs() {
    if !Path::new("/proc/self").exists() {
        return;
    }
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(SCRATCH_PREFIX))
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

fn generated(cell: &'static OnceLock<PathBuf>, preset: Preset) -> &'static Path {
    cell.get_or_init(|| {
        let path = scratch_dir().join(format!("{preset}.gguf"));
        write_model(&path, preset, SEED).expect("generating a test model");
        path
    })
}

/// The tiny random-weight model (about 0.5 MB, generated once per process).
pub fn tiny_model() -> &'static Path {
    static TINY: OnceLock<PathBuf> = OnceLock::new();
    generated(&TINY, Preset::Tiny)
}

/// The scripted reasoning model (`tiny-think`: its template opens
/// `<think>`; greedy, it thinks `Sum=4?` and answers `FOUR`).
pub fn think_model() -> &'static Path {
    static THINK: OnceLock<PathBuf> = OnceLock::new();
    generated(&THINK, Preset::TinyThink)
}

/// The SmolLM2-135M-shaped Q8_0 model (about 145 MB, generated once per
/// process); for benchmarks and slow tests.
pub fn bench_model() -> &'static Path {
    static BENCH: OnceLock<PathBuf> = OnceLock::new();
    generated(&BENCH, Preset::Bench135m)
}

/// A fresh, unique path in the scratch directory (nothing is created).
pub fn fresh_path(name: &str) -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    scratch_dir().join(format!("{n}-{name}"))
}

/// Writes `bytes` to a fresh file and returns its path.
pub fn write_temp(name: &str, bytes: &[u8]) -> PathBuf {
    let path = fresh_path(name);
    std::fs::write(&path, bytes).expect("temp dir is writable");
    path
}

/// A GGUF file taken apart just enough to be edited and put back together,
/// for building malformed files. It trusts its input (a generated model);
/// it is a test tool, not a reader.
#[derive(Debug, Clone)]
pub struct RawGguf {
    /// The version field.
    pub version: u32,
    /// Metadata entries in file order.
    pub kvs: Vec<RawKv>,
    /// Tensor table entries in file order.
    pub tensors: Vec<RawTensor>,
    /// Everything from the start of the data section to the end of the file.
    pub data: Vec<u8>,
    /// Alignment used to pad the tables when writing back.
    pub alignment: u64,
}

/// One metadata entry: the key, the type tag, and the encoded value bytes
/// that follow the tag (for arrays: element type, count, elements).
#[derive(Debug, Clone)]
pub struct RawKv {
    /// The key.
    pub key: String,
    /// The value type tag.
    pub tag: u32,
    /// The encoded value after the tag.
    pub payload: Vec<u8>,
}

/// One tensor table entry.
#[derive(Debug, Clone)]
pub struct RawTensor {
    /// Name.
    pub name: String,
    /// Dimensions (ggml order).
    pub dims: Vec<u64>,
    /// ggml type id.
    pub ty: u32,
    /// Offset relative to the data section.
    pub offset: u64,
}

fn encode_str(out: &mut Vec<u8>, s: &[u8]) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s);
}

impl RawKv {
    /// A u32 value.
    pub fn u32(key: &str, v: u32) -> Self {
        RawKv {
            key: key.into(),
            tag: 4,
            payload: v.to_le_bytes().to_vec(),
        }
    }

    /// A string value given as raw bytes (may be invalid UTF-8).
    pub fn str_bytes(key: &str, v: &[u8]) -> Self {
        let mut payload = Vec::new();
        encode_str(&mut payload, v);
        RawKv {
            key: key.into(),
            tag: 8,
            payload,
        }
    }

    /// An array of strings.
    pub fn str_array(key: &str, items: &[String]) -> Self {
        let mut payload = 8u32.to_le_bytes().to_vec();
        payload.extend_from_slice(&(items.len() as u64).to_le_bytes());
        items
            .iter()
            .for_each(|s| encode_str(&mut payload, s.as_bytes()));
        RawKv {
            key: key.into(),
            tag: 9,
            payload,
        }
    }

    /// An array of f32.
    pub fn f32_array(key: &str, items: &[f32]) -> Self {
        let mut payload = 6u32.to_le_bytes().to_vec();
        payload.extend_from_slice(&(items.len() as u64).to_le_bytes());
        items
            .iter()
            .for_each(|v| payload.extend_from_slice(&v.to_le_bytes()));
        RawKv {
            key: key.into(),
            tag: 9,
            payload,
        }
    }

    /// Decodes a string array's elements.
    pub fn strings(&self) -> Vec<String> {
        assert_eq!(self.tag, 9);
        let mut c = Cursor::new(&self.payload);
        assert_eq!(c.u32(), 8, "not a string array");
        let n = c.u64();
        (0..n).map(|_| c.string()).collect()
    }
}

struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        Cursor { bytes, pos: 0 }
    }
    fn take(&mut self, n: usize) -> &'a [u8] {
        let s = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        s
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.take(4).try_into().unwrap())
    }
    fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.take(8).try_into().unwrap())
    }
    fn string(&mut self) -> String {
        let n = self.u64() as usize;
        String::from_utf8(self.take(n).to_vec()).unwrap()
    }
    /// Skips one value of type `tag`.
    fn skip_value(&mut self, tag: u32) {
        match tag {
            0 | 1 | 7 => drop(self.take(1)),
            2 | 3 => drop(self.take(2)),
            4..=6 => drop(self.take(4)),
            10..=12 => drop(self.take(8)),
            8 => drop(self.string()),
            9 => {
                let elem = self.u32();
                for _ in 0..self.u64() {
                    self.skip_value(elem);
                }
            }
            other => panic!("unknown tag {other}"),
        }
    }
}

impl RawGguf {
    /// Takes apart a valid GGUF file.
    pub fn parse(bytes: &[u8]) -> Self {
        let mut c = Cursor::new(bytes);
        assert_eq!(c.take(4), b"GGUF");
        let version = c.u32();
        let n_tensors = c.u64();
        let n_kv = c.u64();
        let mut kvs = Vec::new();
        for _ in 0..n_kv {
            let key = c.string();
            let tag = c.u32();
            let start = c.pos;
            c.skip_value(tag);
            kvs.push(RawKv {
                key,
                tag,
                payload: bytes[start..c.pos].to_vec(),
            });
        }
        let mut tensors = Vec::new();
        for _ in 0..n_tensors {
            let name = c.string();
            let n_dims = c.u32();
            let dims = (0..n_dims).map(|_| c.u64()).collect();
            let ty = c.u32();
            let offset = c.u64();
            tensors.push(RawTensor {
                name,
                dims,
                ty,
                offset,
            });
        }
        let alignment = kvs
            .iter()
            .find(|kv| kv.key == "general.alignment")
            .map_or(32, |kv| {
                u32::from_le_bytes(kv.payload[..4].try_into().unwrap()) as u64
            });
        let data_start = c.pos.div_ceil(alignment as usize) * alignment as usize;
        RawGguf {
            version,
            kvs,
            tensors,
            data: bytes[data_start..].to_vec(),
            alignment,
        }
    }

    /// The tiny model, taken apart.
    pub fn tiny() -> Self {
        Self::parse(&std::fs::read(tiny_model()).expect("tiny model is readable"))
    }

    /// The entry for `key` (panics when absent).
    pub fn kv_mut(&mut self, key: &str) -> &mut RawKv {
        self.kvs
            .iter_mut()
            .find(|kv| kv.key == key)
            .unwrap_or_else(|| panic!("no key {key}"))
    }

    /// Replaces (or appends) the entry with the same key.
    pub fn set(&mut self, kv: RawKv) {
        match self.kvs.iter_mut().find(|k| k.key == kv.key) {
            Some(slot) => *slot = kv,
            None => self.kvs.push(kv),
        }
    }

    /// Removes the entry for `key`.
    pub fn remove(&mut self, key: &str) {
        self.kvs.retain(|kv| kv.key != key);
    }

    /// The byte offset where the tensor table starts, and where the tables end.
    pub fn table_offsets(&self) -> (usize, usize) {
        let bytes = self.header_bytes();
        let mut kv_end = 24;
        for kv in &self.kvs {
            kv_end += 8 + kv.key.len() + 4 + kv.payload.len();
        }
        (kv_end, bytes.len())
    }

    fn header_bytes(&self) -> Vec<u8> {
        let mut out = b"GGUF".to_vec();
        out.extend_from_slice(&self.version.to_le_bytes());
        out.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        out.extend_from_slice(&(self.kvs.len() as u64).to_le_bytes());
        for kv in &self.kvs {
            encode_str(&mut out, kv.key.as_bytes());
            out.extend_from_slice(&kv.tag.to_le_bytes());
            out.extend_from_slice(&kv.payload);
        }
        for t in &self.tensors {
            encode_str(&mut out, t.name.as_bytes());
            out.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
            t.dims
                .iter()
                .for_each(|d| out.extend_from_slice(&d.to_le_bytes()));
            out.extend_from_slice(&t.ty.to_le_bytes());
            out.extend_from_slice(&t.offset.to_le_bytes());
        }
        out
    }

    /// Puts the file back together: tables, padding, then the data section.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = self.header_bytes();
        let padded = out.len().div_ceil(self.alignment as usize) * self.alignment as usize;
        out.resize(padded, 0);
        out.extend_from_slice(&self.data);
        out
    }

    /// Writes the file to a fresh temp path.
    pub fn write(&self, name: &str) -> PathBuf {
        write_temp(name, &self.to_bytes())
    }
}
