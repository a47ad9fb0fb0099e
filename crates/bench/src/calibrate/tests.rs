//! Calibration computed and rendered, on made-up runs.

use super::*;
use crate::report::pct;

/// The snippet read as the `[harness]` table of a configuration file
/// and turned into a route, as the file's reader does (the whole
/// file's reader lives in the `edgecloud` crate, above this one).
fn parse_snippet(toml: &str) -> Result<edgecloud_core::harness::RouteConfig, String> {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct File {
        harness: edgecloud_core::harness::RouteConfig,
    }
    let file: File = toml::from_str(toml).map_err(|e| e.to_string())?;
    file.harness.route("harness").map_err(|e| e.to_string())?;
    Ok(file.harness)
}
use crate::routing_curve::tests::{four, item};

#[test]
fn rendering_names_the_threshold_and_signal() {
    let items = four();
    let curves = vec![curve(&items, Signal::P10Logprob)];
    let choice = choose(&curves[0], Target::CloudShare(0.5));
    let mut c = Calibration {
        deadline_ms: 1000,
        items: 4,
        local_accuracy: 0.5,
        cloud_accuracy: 0.75,
        local_max_ms: 10.0,
        curves,
        choice,
        cross_validated: None,
        fresh: None,
        cost: Some(LocalCost::of(&items)),
        neighbours: None,
        two_stage: Vec::new(),
        prompt_cost_ms: BTreeMap::new(),
        advice: String::new(),
    };
    c.advice = advice(&c);
    assert!(c.advice.contains("p10_logprob"), "{}", c.advice);
    assert!(c.advice.contains("(in sample)"), "{}", c.advice);
    let toml = config_snippet(&c, "dir").unwrap();
    assert!(toml.contains("escalate_below = { signal = \"p10_logprob\", value = -0.750000 }"));
    let harness = parse_snippet(&toml).expect("the snippet parses");
    assert_eq!(
        harness.resolved_policy("harness").unwrap(),
        Some(edgecloud_core::harness::Policy::cascade(-0.75))
    );
    let md = render_markdown(&c, "dir");
    assert!(md.contains("| random routing |"));
    assert!(
        md.contains("| `p10_logprob` | 1 | 20 | 10.0 / 10.0 |"),
        "{md}"
    );
    assert!(render_chart(&c).contains("random routing"));
    // A streamable signal's snippet offers early escalation, and the
    // line, uncommented, is a valid config.
    let mut w = c.clone();
    w.choice = Some(Choice {
        signal: Signal::MinWindowLogprob,
        ..c.choice.unwrap()
    });
    let toml = config_snippet(&w, "dir").unwrap();
    assert!(toml.contains("# escalate_early = true"), "{toml}");
    let on = toml.replace("# escalate_early = true", "escalate_early = true");
    parse_snippet(&on).expect("early escalation parses");
    // The agreement signal's snippet says what requests must ask for.
    w.choice = Some(Choice {
        signal: Signal::AnswerAgreement,
        ..c.choice.unwrap()
    });
    w.cost = Some(LocalCost {
        samples: 4,
        ..LocalCost::of(&items)
    });
    assert!(config_snippet(&w, "dir")
        .unwrap()
        .contains("consensus\n# of 4 samples"));
}

#[test]
fn the_cost_of_a_consensus_run_is_every_sample() {
    let mut items = four();
    for (i, it) in items.iter_mut().enumerate() {
        it.samples = 4;
        it.local_tokens = Some(400 + 40 * i as u64);
        it.answer_tokens = Some(100);
        it.local_ms = 1000.0 * (i + 1) as f64;
        it.signals.insert(Signal::AnswerAgreement, 0.25 * i as f64);
    }
    let cost = LocalCost::of(&items);
    assert_eq!(cost.samples, 4);
    assert_eq!(cost.tokens_mean, Some(460.0));
    assert_eq!(cost.answer_tokens_mean, Some(100.0));
    assert_eq!((cost.ms_p50, cost.ms_mean), (2000.0, 2500.0));
    let curves = vec![
        curve(&items, Signal::P10Logprob),
        curve(&items, Signal::AnswerAgreement),
    ];
    let c = Calibration {
        deadline_ms: 1000,
        items: 4,
        local_accuracy: 0.5,
        cloud_accuracy: 0.75,
        local_max_ms: 4000.0,
        choice: choose(&curves[1], Target::Cpt80),
        curves,
        cross_validated: None,
        fresh: None,
        cost: Some(cost),
        neighbours: None,
        two_stage: Vec::new(),
        prompt_cost_ms: BTreeMap::new(),
        advice: String::new(),
    };
    let md = render_markdown(&c, "dir");
    assert!(
        md.contains("| `answer_agreement` | 4 | 460 | 2000 / 2500 |"),
        "{md}"
    );
    assert!(
        md.contains("| `p10_logprob` | 1 | 100 | – (decoded with the other samples) |"),
        "{md}"
    );
}

/// The advice and the config quote the held-out figures once there
/// are some.
#[test]
fn advice_and_config_use_the_held_out_figures() {
    let items: Vec<PairedItem> = (0..40)
        .map(|i| {
            let v = -(i as f64) / 10.0;
            item(&i.to_string(), Some(v), v > -2.0, true)
        })
        .collect();
    let curves = vec![curve(&items, Signal::P10Logprob)];
    let choice = choose(&curves[0], Target::Cpt80);
    let cv = cross_validate(
        &items,
        &[Signal::P10Logprob],
        Target::Cpt80,
        &HeldOutSettings::default(),
    );
    let mut c = Calibration {
        deadline_ms: 1000,
        items: 40,
        local_accuracy: 0.5,
        cloud_accuracy: 1.0,
        local_max_ms: 10.0,
        curves,
        choice,
        cross_validated: Some(cv),
        fresh: None,
        cost: None,
        neighbours: None,
        two_stage: Vec::new(),
        prompt_cost_ms: BTreeMap::new(),
        advice: String::new(),
    };
    c.advice = advice(&c);
    let h = c.held_out_choice().unwrap();
    assert!(c.advice.contains("not fitted on"), "{}", c.advice);
    assert!(c.advice.contains(&pct(h.accuracy)), "{}", c.advice);
    let toml = config_snippet(&c, "dir").unwrap();
    assert!(
        toml.contains("# Held out (5-fold cross-validation"),
        "{toml}"
    );
    parse_snippet(&toml).expect("the snippet parses");
    let md = render_markdown(&c, "dir");
    assert!(md.contains("APGR held out"));
    assert!(md.contains("**Held out**"));
    // With the local model as accurate as the cloud there is no gap to
    // recover: no threshold is written, whatever the curve allows.
    c.cloud_accuracy = c.local_accuracy;
    c.advice = advice(&c);
    assert!(c.advice.starts_with("Local only"), "{}", c.advice);
    assert_eq!(config_snippet(&c, "dir"), None);
}

#[test]
fn a_one_class_calibration_set_is_refused_by_name() {
    let all = |right: bool| -> Vec<PairedItem> {
        (0..6)
            .map(|i| item(&i.to_string(), Some(-(i as f64)), right, true))
            .collect()
    };
    let e = one_class_refused(&all(true)).unwrap_err().to_string();
    assert!(
        e.contains("one-class") && e.contains("right on all 6") && e.contains("`local-only`"),
        "{e}"
    );
    let e = one_class_refused(&all(false)).unwrap_err().to_string();
    assert!(
        e.contains("wrong on all 6") && e.contains("`cloud-only`"),
        "{e}"
    );
    let mut mixed = all(true);
    mixed[0].local_correct = false;
    assert!(one_class_refused(&mixed).is_ok());
}
