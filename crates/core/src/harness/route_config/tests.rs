//! Tables read into routes: thresholds in a signal's units, early and
//! prompt-stage escalation, and the mistakes each check names. The whole
//! file's reader is the `edgecloud` crate's; here a file is its
//! `[harness]` and `[routes.NAME]` tables, checked as that reader checks
//! them.

use super::*;
use crate::harness::scoring::Signal;

/// A configuration file's route tables, read and checked the way the
/// `edgecloud` crate's `HarnessConfig` reads them.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct HarnessConfig {
    #[serde(default)]
    harness: RouteConfig,
    #[serde(default)]
    routes: std::collections::BTreeMap<String, RouteConfig>,
}

impl HarnessConfig {
    fn from_toml_str(text: &str) -> Result<Self, ConfigError> {
        let cfg: Self = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: None,
            detail: e.to_string(),
        })?;
        cfg.harness.resolved_policy("harness")?;
        for (name, r) in &cfg.routes {
            r.resolved_policy(&format!("routes.{name}"))?;
        }
        Ok(cfg)
    }
}

#[test]
fn the_example_tables_build_routes() {
    let cfg = HarnessConfig::from_toml_str(
        "[harness]\npolicy = \"cascade\"\ncompress_max_tokens = 2000\n\
         [routes.vehicle_control]\npolicy = \"local-only\"\ndeadline_ms = 200\n",
    )
    .expect("valid");
    let vc = cfg.routes["vehicle_control"]
        .route("routes.vehicle_control")
        .expect("valid route");
    assert_eq!(vc.policy, Some(Policy::LocalOnly));
    assert_eq!(vc.deadline, Some(Duration::from_millis(200)));
    let h = cfg.harness.route("harness").expect("valid");
    assert_eq!(
        h.policy,
        Some(Policy::Cascade {
            threshold: 0.4,
            local_share: 0.5
        })
    );
    assert!(h.compressor.is_some());
}

#[test]
fn escalate_below_is_a_cascade_threshold_in_signal_units() {
    let cfg = HarnessConfig::from_toml_str(
        "[routes.qa]\npolicy = \"cascade\"\nescalate_below = { signal = \"p10_logprob\", value = -1.2 }\n",
    )
    .expect("valid");
    let r = cfg.routes["qa"]
        .to_route("routes.qa", &Named::default())
        .expect("valid");
    assert_eq!(r.policy, Some(Policy::cascade(-1.2)));
    assert!(matches!(r.scorer, Some(Some(_))));
    let err = |t: &str| HarnessConfig::from_toml_str(t).unwrap_err().to_string();
    assert!(err(
        "[harness]\npolicy = \"race\"\nescalate_below = { signal = \"p10_logprob\", value = -1 }"
    )
    .contains("applies to `cascade`"));
    assert!(err("[harness]\npolicy = \"cascade\"\ncascade_threshold = 0.3\nescalate_below = { signal = \"p10_logprob\", value = -1 }")
        .contains("not both"));
    assert!(err(
        "[harness]\npolicy = \"cascade\"\nescalate_below = { signal = \"p5\", value = -1 }"
    )
    .contains("p5"));
    let both = HarnessConfig::from_toml_str(
        "[harness]\npolicy = \"cascade\"\nscorer = \"default\"\nescalate_below = { signal = \"mean_logprob\", value = -1 }",
    )
    .expect("parses");
    let e = both
        .harness
        .to_route("harness", &Named::default())
        .unwrap_err();
    assert!(e.to_string().contains("drop `scorer`"), "{e}");
}

#[test]
fn escalate_early_needs_a_streamable_escalate_below() {
    let cfg = HarnessConfig::from_toml_str(
        "[harness]\npolicy = \"cascade\"\nescalate_below = { signal = \"min_window_logprob\", value = -1.5 }\nescalate_early = true\n",
    )
    .expect("valid");
    let r = cfg
        .harness
        .to_route("harness", &Named::default())
        .expect("valid");
    assert_eq!(r.escalate_early, Some(Some(Signal::MinWindowLogprob)));
    let err = |t: &str| HarnessConfig::from_toml_str(t).unwrap_err().to_string();
    assert!(
        err("[harness]\npolicy = \"cascade\"\nescalate_early = true")
            .contains("needs `escalate_below`")
    );
    let e = err("[harness]\npolicy = \"cascade\"\nescalate_below = { signal = \"mean_logprob\", value = -1 }\nescalate_early = true");
    assert!(
        e.contains("escalate_early") && e.contains("mean_logprob"),
        "{e}"
    );
    assert!(
        err("[harness]\npolicy = \"race\"\nescalate_early = true").contains("applies to `cascade`")
    );
    // Off: the route says so, overriding an inherited `true`.
    let off = HarnessConfig::from_toml_str(
        "[harness]\npolicy = \"cascade\"\nescalate_below = { signal = \"min_logprob\", value = -3 }\nescalate_early = false\n",
    )
    .expect("valid");
    let r = off
        .harness
        .to_route("harness", &Named::default())
        .expect("valid");
    assert_eq!(r.escalate_early, Some(None));
}

#[test]
fn prompt_escalate_below_is_a_cascade_stage_on_a_signal_read_before_generation() {
    let route = |t: &str| {
        HarnessConfig::from_toml_str(t)
            .map_err(|e| e.to_string())
            .and_then(|c| {
                c.harness
                    .to_route("harness", &Named::default())
                    .map_err(|e| e.to_string())
            })
    };
    let r = route(
        "[harness]\npolicy = \"cascade\"\nescalate_below = { signal = \"min_logprob\", value = -3 }\nprompt_escalate_below = { signal = \"prompt_logprob\", value = -2.5 }\n",
    )
    .expect("valid");
    assert_eq!(
        r.prompt_escalate_below,
        Some(Some((Signal::PromptLogprob, -2.5)))
    );
    let r = route(
        "[harness]\npolicy = \"cascade\"\nescalate_below = { signal = \"min_logprob\", value = -3 }\nprompt_escalate_below = { signal = \"prompt_brevity\", value = -120 }\n",
    )
    .expect("valid");
    assert_eq!(
        r.prompt_escalate_below,
        Some(Some((Signal::PromptBrevity, -120.0)))
    );
    let e = route("[harness]\npolicy = \"race\"\nprompt_escalate_below = { signal = \"prompt_logprob\", value = -2 }").unwrap_err();
    assert!(e.contains("applies to `cascade`"), "{e}");
    let e = route("[harness]\npolicy = \"cascade\"\nprompt_escalate_below = { signal = \"prompt_neighbours\", value = 0.5 }").unwrap_err();
    assert!(
        e.contains("prompt_neighbours") && e.contains("bench calibrate"),
        "{e}"
    );
    let e = route("[harness]\npolicy = \"cascade\"\nprompt_escalate_below = { signal = \"min_logprob\", value = -2 }").unwrap_err();
    assert!(e.contains("use `escalate_below`"), "{e}");
    let e = route("[harness]\npolicy = \"cascade\"\nescalate_below = { signal = \"prompt_logprob\", value = -2 }").unwrap_err();
    assert!(e.contains("use `prompt_escalate_below`"), "{e}");
    let e = route("[harness]\npolicy = \"cascade\"\nescalate_below = { signal = \"prompt_brevity\", value = -2 }").unwrap_err();
    assert!(e.contains("use `prompt_escalate_below`"), "{e}");
}

#[test]
fn mistakes_get_named() {
    let err = |t: &str| HarnessConfig::from_toml_str(t).unwrap_err().to_string();
    assert!(err("[harness]\npolicy = \"racer\"").contains("unknown policy `racer`"));
    assert!(err("[harness]\ndeadlin_ms = 3").contains("deadlin_ms"));
    assert!(err("[harness]\ncascade_threshold = 0.3").contains("set `policy = \"cascade\"`"));
    assert!(
        err("[routes.a]\npolicy = \"race\"\ncloud_share = 0.2").contains("applies to `fallback`")
    );
    assert!(err("[harness]\npolicy = \"cascade\"\nlocal_share = 2.0").contains("local_share"));
    let cfg = HarnessConfig::from_toml_str("[harness]\nscorer = \"mine\"").expect("parses");
    let e = cfg
        .harness
        .to_route("harness", &Named::default())
        .unwrap_err();
    assert!(e.to_string().contains("`mine`"), "{e}");
}
