//! An application that embeds the cloud lane alone: the harness with one
//! OpenAI-compatible endpoint, built without llama.cpp, hyper or the bench
//! module (`required-features = ["cloud"]`):
//!
//! ```sh
//! cargo run --release --no-default-features --features cloud --example cloud_only -- \
//!     [BASE_URL] [MODEL] [PROMPT]
//! ```
//!
//! The key comes from `OPENAI_API_KEY` (unset: no key, which local servers
//! accept). With no arguments it asks `http://127.0.0.1:9/v1`, where nothing
//! listens, so it runs anywhere and shows the typed error a run reports
//! when the endpoint is unreachable (exit status 1).

use edgecloud::{CloudBackend, CloudConfig, Harness, Lane, Policy, Request};
use std::process::ExitCode;
use std::time::Duration;

fn main() -> Result<ExitCode, Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let base_url = args
        .next()
        .unwrap_or_else(|| "http://127.0.0.1:9/v1".into());
    let model = args.next().unwrap_or_else(|| "gpt-4o-mini".into());
    let prompt = args
        .next()
        .unwrap_or_else(|| "Say hello in five words.".into());

    let harness = Harness::builder()
        .cloud(CloudBackend::start(CloudConfig::new(base_url, model))?)
        .policy(Policy::CloudOnly)
        .deadline(Duration::from_secs(10))
        .build()?;
    let mut request = Request::user(prompt);
    request.sampling.max_tokens = 32;
    let outcome = harness.run_blocking(request)?;

    let cloud = outcome.lane(Lane::Cloud);
    match (&outcome.text, &cloud.error) {
        (Some(text), _) => {
            println!("{text}");
            eprintln!("{} ({:?})", outcome.decision.reason, outcome.status);
            Ok(ExitCode::SUCCESS)
        }
        (None, Some(error)) => {
            eprintln!(
                "cloud lane ({}): {}",
                error.kind(),
                edgecloud::error_chain(error)
            );
            Ok(ExitCode::FAILURE)
        }
        (None, None) => {
            eprintln!(
                "no answer: {} ({:?})",
                outcome.decision.reason, outcome.status
            );
            Ok(ExitCode::FAILURE)
        }
    }
}
