//! `edgecloud bench`: benchmark runs, and `bench compare` / `bench report`
//! over their output directories. Drawing progress and handling Ctrl-C
//! live here; everything measured and written comes from
//! `edgecloud::bench`.

use anyhow::Context as _;
use edgecloud::bench::{
    compare, read_runs, read_summary, render_comparison, write_report, Environment, Summary,
};
use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `edgecloud bench`.
#[derive(Debug, clap::Args)]
pub(crate) struct BenchArgs {
    #[command(subcommand)]
    command: BenchCommand,
}

#[derive(Debug, clap::Subcommand)]
enum BenchCommand {
    /// Print the differences between two bench reports, figure by figure,
    /// with ratios (B / A).
    Compare {
        /// The first output directory (A), or its summary.json.
        a: PathBuf,
        /// The second output directory (B), or its summary.json.
        b: PathBuf,
        /// Print the comparison as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Rebuild summary.json, report.md and the charts of an output
    /// directory from its runs.jsonl (after a crash, or after editing).
    Report {
        /// The output directory.
        dir: PathBuf,
    },
}

pub(crate) fn run(args: BenchArgs) -> anyhow::Result<ExitCode> {
    match args.command {
        BenchCommand::Compare { a, b, json } => {
            let sa =
                read_summary(&a).with_context(|| format!("reading report A ({})", a.display()))?;
            let sb =
                read_summary(&b).with_context(|| format!("reading report B ({})", b.display()))?;
            let c = compare(&sa, &sb);
            if json {
                println!("{}", serde_json::to_string_pretty(&c)?);
            } else {
                print!(
                    "{}",
                    render_comparison(&c, &a.display().to_string(), &b.display().to_string())
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        BenchCommand::Report { dir } => {
            let runs = read_runs(&dir)?;
            // Settings and environment come from the summary written when
            // the bench started; without one, this machine stands in.
            let summary = match read_summary(&dir) {
                Ok(old) => Summary::new(
                    old.settings,
                    Environment {
                        started_at: old.started_at,
                        wall_s: old.wall_s,
                        machine: old.machine,
                        build: old.build,
                        model: old.model,
                    },
                    &runs,
                    old.interrupted,
                ),
                Err(_) => Summary::new(Default::default(), Environment::detect(None), &runs, true),
            };
            write_report(&dir, &summary)?;
            eprintln!(
                "wrote {} runs' summary, report and charts to {}",
                runs.len(),
                dir.display()
            );
            Ok(ExitCode::SUCCESS)
        }
    }
}
