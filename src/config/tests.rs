//! The configuration file read, checked and turned into routes.

use super::read::{lanes_built, refuse_sections};
use super::*;
use crate::harness::{ConfigError, Policy, Setting};
use crate::lane::Lane;
use std::time::Duration;

#[test]
fn each_invalid_setting_says_which_setting_it_is() {
    let setting = |text: &str| HarnessConfig::from_toml_str(text).unwrap_err().setting();
    assert_eq!(
        setting("[harness]\npolicy = \"racer\"\n"),
        Some(Setting::Policy)
    );
    assert_eq!(
        setting("[harness]\npolicy = \"race\"\ncascade_threshold = 0.5\n"),
        Some(Setting::Policy)
    );
    assert_eq!(
        setting("[harness]\ndefault_route = \"nowhere\"\n"),
        Some(Setting::Route)
    );
    assert_eq!(setting("[harness\n"), None);
    let timing = RouteConfig {
        cancel_grace_ms: Some(-1.0),
        ..RouteConfig::default()
    };
    let err = timing.route("harness").unwrap_err();
    assert_eq!(err.setting(), Some(Setting::Timing));
    let scorer = RouteConfig {
        scorer: Some("mine".into()),
        ..RouteConfig::default()
    };
    let err = scorer.route("harness").unwrap_err();
    assert_eq!(err.setting(), Some(Setting::Scoring));
}

#[test]
fn a_lane_section_without_its_feature_is_refused_by_name() {
    let text = "[cloud]\nbase_url = \"http://x/v1\"\n[harness]\npolicy = \"race\"\n";
    let err = refuse_sections(text, &["local", "cloud"]).unwrap_err();
    assert!(matches!(&err, ConfigError::Invalid { key, .. } if key == "cloud"));
    assert!(err.to_string().contains("`cloud` cargo feature"), "{err}");
    assert!(refuse_sections(text, &["local"]).is_ok());
    assert!(refuse_sections(text, &[]).is_ok());
    // Not TOML: the real parse reports it, with its position.
    assert!(refuse_sections("[cloud", &["cloud"]).is_ok());
    // This build has both lanes: sections pass.
    assert!(lanes_built(text).is_ok() || cfg!(not(all(feature = "local", feature = "cloud"))));
}

#[test]
fn the_example_config_parses_and_builds_routes() {
    let cfg = HarnessConfig::from_toml_str(EXAMPLE_CONFIG).expect("example is valid");
    assert_eq!(cfg.routes.len(), 2);
    let vc = cfg.routes["vehicle_control"]
        .route("routes.vehicle_control")
        .expect("valid route");
    drop(vc);
    assert_eq!(
        cfg.route_cloud_model(None),
        Some("gpt-4o"),
        "the default route's"
    );
    assert_eq!(cfg.route_cloud_model(Some("vehicle_control")), None);
    assert_eq!(
        cfg.route_deadline(Some("vehicle_control")),
        Duration::from_millis(200)
    );
    assert_eq!(cfg.embeddings_lane(None), Lane::Local);
    assert!(cfg.check_cloud_routes().is_ok());
    assert_eq!(
        cfg.harness.resolved_policy("harness").expect("valid"),
        Some(Policy::Cascade {
            threshold: 0.4,
            local_share: 0.5
        })
    );
    cfg.harness.route("harness").expect("valid");
}
