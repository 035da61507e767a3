//! `cleave gen`: a valid BIG SSTable of a simple table, for tests and benchmarks.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;

use super::failure::Failed;
use cleave::gen::{self, Content, GenOptions};
use cleave::sstable::{Partitioner, Version};

/// Parses `4GiB`, `64KiB`, `16k`, `1000`.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| format!("{s:?}: expected a size like 4GiB, 64KiB or 1000"))?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        u => return Err(format!("{s:?}: unknown unit {u:?} (B, KiB, MiB, GiB, TiB)")),
    };
    Ok((n * mult as f64) as u64)
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum PartitionerArg {
    Murmur3,
    Random,
}

#[derive(clap::Args)]
pub struct GenArgs {
    #[arg(long)]
    pub out: PathBuf,
    /// Uncompressed Data.db size.
    #[arg(long, value_parser = parse_size, default_value = "1GiB")]
    pub size: u64,
    #[arg(long, value_parser = parse_size, default_value = "64KiB")]
    pub partition_size: u64,
    #[arg(long, value_parser = parse_size, default_value = "4KiB")]
    pub row_size: u64,
    /// BIG version (ma … oa).
    #[arg(long, default_value = "nb")]
    pub version: String,
    #[arg(long, conflicts_with = "random")]
    pub compressible: bool,
    #[arg(long)]
    pub random: bool,
    /// LZ4 chunk length.
    #[arg(long, value_parser = parse_size, default_value = "16KiB")]
    pub chunk: u64,
    /// No compression: Data.db with CRC.db.
    #[arg(long)]
    pub uncompressed: bool,
    #[arg(long, value_enum, default_value = "murmur3")]
    pub partitioner: PartitionerArg,
    #[arg(long, default_value_t = 1)]
    pub generation: u32,
    #[arg(long, default_value_t = 21550)]
    pub seed: u64,
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: GenArgs) -> Result<ExitCode> {
    super::failure::report(
        a.json,
        || gen(&a),
        |r| {
            if a.json {
                super::json::print(&r, "gen")?;
            } else {
                println!(
                    "{}: {} partitions, {} rows, {} bytes uncompressed, {} on disk, {:.1} s ({:.0} MB/s)",
                    r.data.display(),
                    r.partitions,
                    r.rows,
                    r.data_length,
                    r.data_file_bytes,
                    r.seconds,
                    r.data_length as f64 / r.seconds / 1e6
                );
            }
            Ok(ExitCode::SUCCESS)
        },
    )
}

/// The arguments are checked here, as a request (`InvalidRequest`), before the library
/// writes anything; what fails after is the library's reason (a full disk, a path).
fn gen(a: &GenArgs) -> std::result::Result<gen::GenReport, Failed> {
    let version = Version::parse(&a.version)
        .filter(|v| v.is_supported_big())
        .ok_or_else(|| {
            Failed::invalid(
                &a.out,
                format!(
                    "--version {:?}: expected one of {}",
                    a.version,
                    cleave::sstable::descriptor::SUPPORTED_BIG_VERSIONS.join(", ")
                ),
            )
        })?;
    if !a.chunk.is_power_of_two() || a.chunk < 1024 || a.chunk > (1 << 30) {
        return Err(Failed::invalid(
            &a.out,
            format!(
                "--chunk {}: expected a power of two between 1KiB and 1GiB",
                a.chunk
            ),
        ));
    }
    if a.row_size < 16 || a.partition_size < a.row_size {
        return Err(Failed::invalid(
            &a.out,
            format!(
                "--row-size {} --partition-size {}: the row size must be >= 16 bytes and <= the partition size",
                a.row_size, a.partition_size
            ),
        ));
    }
    let desc = cleave::sstable::Descriptor {
        dir: a.out.clone(),
        version,
        id: cleave::sstable::SSTableId::Sequence(a.generation),
        format: cleave::sstable::Format::Big,
    };
    let data = desc.path(&cleave::sstable::Component::Data);
    if data.exists() {
        return Err(Failed::invalid(
            &data,
            format!(
                "{} already exists; choose another --out or --generation",
                data.display()
            ),
        ));
    }
    std::fs::create_dir_all(&a.out).map_err(|e| Failed::io(&a.out, e))?;
    let opts = GenOptions {
        out: a.out.clone(),
        size: a.size,
        partition_size: a.partition_size,
        row_size: a.row_size,
        version,
        content: if a.random {
            Content::Random
        } else {
            Content::Compressible
        },
        chunk_length: (!a.uncompressed).then_some(a.chunk as u32),
        partitioner: match a.partitioner {
            PartitionerArg::Murmur3 => Partitioner::Murmur3,
            PartitionerArg::Random => Partitioner::Random,
        },
        generation: a.generation,
        seed: a.seed,
    };
    let bar = super::progress::bytes_bar(a.size, "generating");
    let r = gen::generate(&opts, &mut |n| bar.inc(n));
    bar.finish_and_clear();
    Ok(r?)
}
