//! The workspace's dependency arrows are the design (docs/layout.md): each
//! crate may depend on the crates below it and on nothing the drawing
//! forbids. Read from `cargo metadata`, so a dependency added to any
//! Cargo.toml that breaks the layering fails here, naming the crate and
//! the dependency.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

/// Each crate: the workspace crates it may depend on (normal
/// dependencies), and the outside crates it must not.
const RULES: &[(&str, &[&str], &[&str])] = &[
    (
        "edgecloud-core",
        &[],
        &[LLAMA, LLAMA_SYS, REQWEST, HYPER, HYPER_UTIL],
    ),
    (
        "edgecloud-gguf",
        &["edgecloud-core"],
        &[LLAMA, LLAMA_SYS, REQWEST, HYPER, HYPER_UTIL],
    ),
    (
        "edgecloud-wire",
        &["edgecloud-core"],
        &[LLAMA, LLAMA_SYS, REQWEST, HYPER, HYPER_UTIL],
    ),
    (
        "edgecloud-local",
        &["edgecloud-core", "edgecloud-gguf"],
        &[REQWEST, HYPER, HYPER_UTIL],
    ),
    (
        "edgecloud-cloud",
        &["edgecloud-core", "edgecloud-wire"],
        &[LLAMA, LLAMA_SYS, HYPER_UTIL],
    ),
    (
        "edgecloud-serve",
        &["edgecloud-core", "edgecloud-wire"],
        &[LLAMA, LLAMA_SYS, REQWEST],
    ),
    (
        "edgecloud-bench",
        &["edgecloud-core", "edgecloud-gguf", "edgecloud-wire"],
        &[LLAMA, LLAMA_SYS, REQWEST, HYPER, HYPER_UTIL],
    ),
    (
        "edgecloud",
        &[
            "edgecloud-core",
            "edgecloud-gguf",
            "edgecloud-wire",
            "edgecloud-local",
            "edgecloud-cloud",
            "edgecloud-serve",
            "edgecloud-bench",
        ],
        &[LLAMA, LLAMA_SYS, HYPER, HYPER_UTIL],
    ),
    (
        "edgecloud-capi",
        &["edgecloud", "edgecloud-core"],
        &[LLAMA, LLAMA_SYS],
    ),
    ("edgecloud-python", &["edgecloud"], &[LLAMA, LLAMA_SYS]),
];

const LLAMA: &str = "llama-cpp-2";
const LLAMA_SYS: &str = "llama-cpp-sys-2";
const REQWEST: &str = "reqwest";
const HYPER: &str = "hyper";
const HYPER_UTIL: &str = "hyper-util";

/// Every workspace package and its normal (not dev, not build)
/// dependencies, by name.
fn workspace_dependencies() -> BTreeMap<String, Vec<String>> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(PathBuf::from(env!("CARGO_MANIFEST_DIR")))
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let deps = p["dependencies"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|d| d["kind"].is_null())
                .map(|d| d["name"].as_str().unwrap().to_string())
                .collect();
            (p["name"].as_str().unwrap().to_string(), deps)
        })
        .collect()
}

#[test]
fn every_crate_depends_only_on_what_the_drawing_allows() {
    let packages = workspace_dependencies();
    let ours: Vec<&String> = packages.keys().collect();
    for name in &ours {
        assert!(
            RULES.iter().any(|r| r.0 == name.as_str()),
            "{name} is a workspace crate with no rule here: draw it in docs/layout.md and add it"
        );
    }
    for (name, allowed, forbidden) in RULES {
        let deps = packages
            .get(*name)
            .unwrap_or_else(|| panic!("{name} is not in the workspace"));
        for dep in deps {
            if packages.contains_key(dep) {
                assert!(
                    allowed.contains(&dep.as_str()),
                    "{name} depends on {dep}, which the layering does not allow \
                     (docs/layout.md; allowed: {allowed:?})"
                );
            }
            assert!(
                !forbidden.contains(&dep.as_str()),
                "{name} depends on {dep}, which it must not (docs/layout.md)"
            );
        }
    }
}

/// The rules themselves point one way: listing a crate's allowed
/// dependencies before it (in `RULES`' order) is a layering without
/// circles.
#[test]
fn the_layering_has_no_circle() {
    for (i, (name, allowed, _)) in RULES.iter().enumerate() {
        for dep in *allowed {
            let at = RULES.iter().position(|r| r.0 == *dep).unwrap();
            assert!(at < i, "{name} may depend on {dep}, which is not below it");
        }
    }
}
