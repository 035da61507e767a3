//! `cleave validate FILE...`: the controller's checks of manifests, offline. A thin shell over
//! `cleave::operator::validate_cli` (one function, so the operator owns every rule).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};

#[derive(clap::Args)]
pub struct ValidateArgs {
    /// Manifest files (YAML, one or more documents each). Documents that are not cleave.dev
    /// resources are skipped.
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
}

/// Prints `FILE: ok (...)` per clean file, and `FILE: <Kind/name> error[<Reason>] <field>:
/// <message>` per problem; exit 0 when there is none, 1 otherwise.
pub fn run(a: ValidateArgs) -> Result<ExitCode> {
    let mut bad = 0usize;
    for f in &a.files {
        let text = std::fs::read_to_string(f).with_context(|| format!("read {}", f.display()))?;
        let c = cleave::operator::validate_cli::check_manifest(&text);
        if c.problems.is_empty() {
            let mut what = format!("{} checked", c.resources.len());
            if !c.skipped.is_empty() {
                what.push_str(&format!(", skipped {}", c.skipped.join(", ")));
            }
            println!("{}: ok ({what})", f.display());
        }
        for p in &c.problems {
            bad += 1;
            println!(
                "{}: document {} {} error[{}] {}: {}",
                f.display(),
                p.document,
                p.object,
                p.reason.as_str(),
                p.field,
                p.message
            );
        }
    }
    Ok(if bad == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
