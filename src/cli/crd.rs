//! `cleave crd`: the CustomResourceDefinitions, as `crds/cleave.dev.yaml` holds them.

use std::process::ExitCode;

use anyhow::Result;

pub fn run() -> Result<ExitCode> {
    print!("{}", cleave::operator::crd::crds_yaml()?);
    Ok(ExitCode::SUCCESS)
}
