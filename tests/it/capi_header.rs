//! The checked-in C header (`include/edgecloud.h`) is what cbindgen makes
//! of `crates/capi/src` with `cbindgen.toml`: a change to the C API that does not
//! regenerate the header fails here. `EDGECLOUD_BLESS=1` rewrites it
//! (`scripts/capi --header`).

use std::path::PathBuf;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn the_checked_in_header_is_what_cbindgen_generates() {
    let root = root();
    let config =
        cbindgen::Config::from_file(root.join("cbindgen.toml")).expect("cbindgen.toml parses");
    let mut builder = cbindgen::Builder::new().with_config(config);
    for file in ["lib.rs", "boundary.rs", "callbacks.rs"] {
        builder = builder.with_src(root.join("crates/capi/src").join(file));
    }
    let bindings = builder.generate().expect("cbindgen reads crates/capi/src");
    let mut generated = Vec::new();
    bindings.write(&mut generated);
    let generated = String::from_utf8(generated).expect("the header is UTF-8");
    let path = root.join("include/edgecloud.h");
    if std::env::var_os("EDGECLOUD_BLESS").is_some_and(|v| v == "1") {
        std::fs::create_dir_all(path.parent().expect("include/")).expect("mkdir include");
        std::fs::write(&path, &generated).expect("writing include/edgecloud.h");
        return;
    }
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        checked_in == generated,
        "include/edgecloud.h differs from what cbindgen generates from crates/capi/src; \
         run `scripts/capi --header` (EDGECLOUD_BLESS=1) and commit it"
    );
    for name in [
        "ec_version",
        "ec_harness_new",
        "ec_harness_new_with",
        "ec_harness_free",
        "ec_run",
        "ec_start",
        "ec_handle_wait",
        "ec_handle_abort",
        "ec_handle_free",
        "ec_string_free",
        "typedef struct ec_harness ec_harness",
        "typedef struct ec_handle ec_handle",
        "EC_ERR_INVALID_REQUEST",
    ] {
        assert!(generated.contains(name), "the header lacks {name}");
    }
}
