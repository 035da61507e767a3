//! The `cleave` command line.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod cli;

#[derive(Parser)]
#[command(
    name = "cleave",
    version,
    about = "Split Apache Cassandra SSTables by token range without rewriting rows"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Generate a table, anticompact it, check the children: the main job on a default.
    Demo(cli::demo::DemoArgs),
    /// Print the CustomResourceDefinitions (AnticompactionJob, RangeStream, CleanupJob).
    Crd,
    /// The sidecar: reconcile this node's AnticompactionJobs, RangeStreams and CleanupJobs.
    Run(Box<cli::run::RunArgs>),
    /// Describe an SSTable and check every component against the others.
    Inspect(cli::inspect::InspectArgs),
    /// Split an SSTable by token range into children that share the parent's chunks.
    Split(cli::split::SplitArgs),
    /// Fully check SSTables and print their partition count and key fingerprint.
    Verify(cli::split::VerifyArgs),
    /// Drop the partitions this node no longer owns, without rewriting a row (docs/cleanup.md).
    Cleanup(cli::cleanup::CleanupArgs),
    /// Finish or roll back an interrupted `split --publish replace` in a table directory.
    Recover(cli::split::RecoverArgs),
    /// Publish the `split`/`cleanup --publish on-restart` intents under a data directory
    /// before Cassandra starts (an init container; docs/split.md "Publish on restart").
    ApplyPending(cli::split::ApplyPendingArgs),
    /// Re-encode an sstable whose first partition is not at position 0 (a dead prefix)
    /// so Cassandra 5.0.5+ compacts it correctly; crash-atomic with `--publish replace`.
    Rewrite(cli::split::RewriteArgs),
    /// Write a valid BIG SSTable of a simple table (tests and benchmarks).
    Gen(cli::gen::GenArgs),
    /// Measure throughput and memory (see docs/benchmarks.md).
    Bench(cli::bench::BenchArgs),
    /// Ship sstables to another node, verified per chunk (docs/stream.md).
    Stream(cli::stream::StreamArgs),
    /// Check AnticompactionJob/RangeStream/CleanupJob manifests with the controller's own rules.
    Validate(cli::validate::ValidateArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // A report piped into `head` ends quietly when the pipe closes; the servers (`run`,
    // `stream`, and `demo`, which runs the reconciler) keep SIGPIPE ignored for their
    // sockets.
    if !matches!(
        cli.command,
        Command::Run(_) | Command::Stream(_) | Command::Demo(_)
    ) {
        cleave::io::proc::restore_sigpipe();
    }
    match &cli.command {
        Command::Run(a) => cli::run::init_tracing(a.log_format, a.log_filter.as_deref(), "info"),
        _ => cli::run::init_tracing(cli::run::LogFormat::Text, None, "warn"),
    }
    let result = match cli.command {
        Command::Demo(a) => cli::demo::run(a),
        Command::Crd => cli::crd::run(),
        Command::Run(a) => cli::run::run(*a),
        Command::Inspect(a) => cli::inspect::run(a),
        Command::Split(a) => cli::split::run(a),
        Command::Verify(a) => cli::split::verify(a),
        Command::Cleanup(a) => cli::cleanup::run(a),
        Command::Recover(a) => cli::split::recover(a),
        Command::ApplyPending(a) => cli::split::apply_pending(a),
        Command::Rewrite(a) => cli::split::rewrite(a),
        Command::Gen(a) => cli::gen::run(a),
        Command::Bench(a) => cli::bench::run(a),
        Command::Stream(a) => cli::stream::run(a),
        Command::Validate(a) => cli::validate::run(a),
    };
    match result {
        Ok(code) => code,
        Err(e) => cli::failure::Failed::of_anyhow(&e).print(false),
    }
}
