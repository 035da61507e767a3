//! One generated parent: a fresh XFS (reflink=1) loop mount on a sparse image, the parent
//! written into it by `cleave gen` (a child process, its throughput recorded), a copy on
//! the plain disk when a configuration runs there, and every run of the fixture. The
//! mount, image and copies are owned by guards and removed also when a run fails.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{anyhow, bail, Context, Result};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::measure::{files_in, run_once, syncfs, Parent, Run, RunCtx};
use super::report::{human, run_line, size_label};
use super::{
    Config, Content, Fixture, Fs, Progress, SplitBenchOptions, ALIGNED_RANDOM_CUTS, GIB, MIB,
};
use crate::bench::ScratchDir;
use crate::io::child;
use crate::io::loopfs::LoopMount;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ParentInfo {
    pub size_bytes: u64,
    pub partition_size: u64,
    pub content: Content,
    pub partitions: u64,
    pub data_length: u64,
    pub data_file_bytes: u64,
    pub chunk_length: u64,
    pub chunks: u64,
    /// Index.db + CompressionInfo.db + Statistics.db + Summary.db.
    pub index_side_bytes: u64,
    pub component_bytes: BTreeMap<String, u64>,
    pub gen_wall_s: f64,
    pub gen_cpu_s: f64,
    pub gen_mb_per_s: f64,
}

fn component_name(p: &Path) -> String {
    let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
    name.rsplit('-').next().unwrap_or(name).to_string()
}

/// The loop device a mount point is on.
pub(crate) fn loop_device(mount_point: &Path) -> Option<String> {
    let out = Command::new("findmnt")
        .args(["-n", "-o", "SOURCE", "--mountpoint"])
        .arg(mount_point)
        .output()
        .ok()?;
    let dev = String::from_utf8_lossy(&out.stdout).trim().to_string();
    dev.starts_with("/dev/loop").then_some(dev)
}

/// Switches the loop device to direct I/O, so that the image's pages are not cached a
/// second time by the host filesystem.
pub(crate) fn loop_direct_io(dev: Option<&str>) -> bool {
    dev.is_some_and(|dev| {
        Command::new("losetup")
            .args(["--direct-io=on", dev])
            .output()
            .is_ok_and(|o| o.status.success())
    })
}

/// Sets a block device's readahead (512-byte sectors) and puts the old value back on drop.
struct Readahead {
    pub dev: String,
    pub old: u64,
}

impl Readahead {
    fn set(dev: &str, sectors: u64) -> Result<Readahead> {
        let out = Command::new("blockdev")
            .args(["--getra", dev])
            .output()
            .context("blockdev --getra")?;
        let old: u64 = String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .with_context(|| format!("blockdev --getra {dev}"))?;
        let ok = Command::new("blockdev")
            .args(["--setra", &sectors.to_string(), dev])
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            bail!("blockdev --setra {sectors} {dev} failed");
        }
        Ok(Readahead {
            dev: dev.to_string(),
            old,
        })
    }
}

impl Drop for Readahead {
    fn drop(&mut self) {
        let _ = Command::new("blockdev")
            .args(["--setra", &self.old.to_string(), &self.dev])
            .status();
    }
}

pub struct FixtureResult {
    pub info: ParentInfo,
    pub runs: Vec<Run>,
}

pub fn run_fixture(
    a: &SplitBenchOptions,
    exe: &Path,
    scratch: &Path,
    fx: &Fixture,
    progress: &Progress,
    loop_dio: &mut bool,
) -> Result<FixtureResult> {
    // Parent + the largest set of outputs (a full copy) + slack; sparse, so only what is
    // written takes space on the disk.
    let on_disk_guess = match fx.content {
        Content::Compressible => fx.size / 2 + fx.size / 8,
        Content::Random => fx.size + fx.size / 16,
    };
    let image_size = (2 * on_disk_guess + 2 * GIB).next_multiple_of(MIB);
    progress.say(format_args!(
        "{}: {} parent, {} partitions, {:?}: mounting a {} XFS (reflink=1) loop image",
        fx.role,
        size_label(fx.size),
        size_label(fx.partition_size),
        fx.content,
        size_label(image_size)
    ));
    let mount = LoopMount::new(scratch, image_size, "xfs")
        .with_context(|| format!("creating a loop XFS under {}", scratch.display()))?;
    let mnt = mount.mount_point.clone();
    let dev = loop_device(&mnt);
    *loop_dio = loop_direct_io(dev.as_deref());
    let image = mnt.parent().map(|d| d.join("fs.img"));
    let parent_dir = mnt.join("parent");
    let out_xfs = mnt.join("out");
    std::fs::create_dir_all(&parent_dir)?;
    std::fs::create_dir_all(&out_xfs)?;

    progress.say(format_args!("{}: generating the parent", fx.role));
    let mut gen = Command::new(exe);
    gen.arg("gen")
        .arg("--out")
        .arg(&parent_dir)
        .args(["--size", &fx.size.to_string()])
        .args(["--partition-size", &fx.partition_size.to_string()])
        .args(["--row-size", &a.row_size.to_string()])
        .args(["--chunk", &a.chunk.to_string()])
        .args(["--version", &a.version])
        .arg(match fx.content {
            Content::Compressible => "--compressible",
            Content::Random => "--random",
        })
        .arg("--json");
    let g = child::measure(&mut gen).context("running cleave gen")?;
    if g.exit_code != Some(0) {
        bail!("cleave gen failed: {}", g.stderr.trim());
    }
    syncfs(&parent_dir)?;
    let gj: Value = serde_json::from_slice(&g.stdout).context("parsing cleave gen --json")?;
    let gu = |k: &str| {
        gj.get(k)
            .and_then(Value::as_u64)
            .ok_or_else(|| anyhow!("cleave gen --json: no {k}"))
    };
    let data = PathBuf::from(
        gj.get("data")
            .and_then(Value::as_str)
            .ok_or_else(|| anyhow!("cleave gen --json: no data"))?,
    );
    let files = files_in(&parent_dir)?;
    let mut component_bytes = BTreeMap::new();
    for f in &files {
        component_bytes.insert(component_name(f), std::fs::metadata(f)?.len());
    }
    let index_side_bytes = [
        "Index.db",
        "CompressionInfo.db",
        "Statistics.db",
        "Summary.db",
    ]
    .iter()
    .map(|c| component_bytes.get(*c).copied().unwrap_or(0))
    .sum();
    let data_length = gu("data_length")?;
    let gen_wall = g.wall.as_secs_f64();
    let info = ParentInfo {
        size_bytes: fx.size,
        partition_size: fx.partition_size,
        content: fx.content,
        partitions: gu("partitions")?,
        data_length,
        data_file_bytes: gu("data_file_bytes")?,
        chunk_length: a.chunk,
        chunks: data_length.div_ceil(a.chunk),
        index_side_bytes,
        component_bytes,
        gen_wall_s: gen_wall,
        gen_cpu_s: (g.user + g.system).as_secs_f64(),
        gen_mb_per_s: data_length as f64 / 1e6 / gen_wall,
    };
    progress.say(format_args!(
        "{}: parent {} partitions, Data.db {} ({} uncompressed), index side {}; gen {:.1} s ({:.0} MB/s)",
        fx.role,
        info.partitions,
        human(info.data_file_bytes as f64),
        human(info.data_length as f64),
        human(info.index_side_bytes as f64),
        gen_wall,
        info.gen_mb_per_s
    ));
    let xfs_parent = Parent {
        data: data.clone(),
        files: files.clone(),
    };

    // The same parent on the plain disk, for `copy` there.
    let plain = if fx.needs_plain_copy() {
        let dir = ScratchDir::new(Some(scratch))?;
        let pdir = dir.path().join("parent");
        let odir = dir.path().join("out");
        std::fs::create_dir_all(&pdir)?;
        std::fs::create_dir_all(&odir)?;
        progress.say(format_args!(
            "{}: copying the parent to the plain disk",
            fx.role
        ));
        let mut pfiles = Vec::new();
        for f in &files {
            let to = pdir.join(f.file_name().context("file name")?);
            std::fs::copy(f, &to)
                .with_context(|| format!("copying {} to {}", f.display(), to.display()))?;
            pfiles.push(to);
        }
        syncfs(&pdir)?;
        let pdata = pdir.join(data.file_name().context("file name")?);
        Some((
            dir,
            Parent {
                data: pdata,
                files: pfiles,
            },
            odir,
        ))
    } else {
        None
    };

    let xfs_ctx = RunCtx {
        exe,
        baseline_exe: a.baseline_exe.as_deref(),
        parts: a.parts,
        parent: &xfs_parent,
        out: &out_xfs,
        image: image.as_deref().filter(|p| p.exists()),
        mount: Some(&mnt),
    };
    let plain_ctx = plain.as_ref().map(|(_, p, o)| RunCtx {
        exe,
        baseline_exe: a.baseline_exe.as_deref(),
        parts: a.parts,
        parent: p,
        out: o,
        image: None,
        mount: None,
    });
    let ctx_for = |c: &Config| -> Result<&RunCtx> {
        match c.fs {
            Fs::Xfs => Ok(&xfs_ctx),
            Fs::Plain => plain_ctx
                .as_ref()
                .ok_or_else(|| anyhow!("no plain-disk parent")),
        }
    };

    let n = a.iterations;
    let mut runs = Vec::new();
    for it in 1..=n {
        for c in &fx.configs {
            let r = run_once(ctx_for(c)?, fx, c, true, it)?;
            progress.say(format_args!(
                "{} {} | {} cold {it}/{n}: {}",
                fx.role,
                size_label(fx.size),
                c.name,
                run_line(&r)
            ));
            runs.push(r);
        }
    }
    for c in &fx.warm {
        let ctx = ctx_for(c)?;
        // One untimed pass brings the parent's pages in.
        let _ = run_once(ctx, fx, c, false, 0)?;
        for it in 1..=n {
            let r = run_once(ctx, fx, c, false, it)?;
            progress.say(format_args!(
                "{} {} | {} warm {it}/{n}: {}",
                fx.role,
                size_label(fx.size),
                c.name,
                run_line(&r)
            ));
            runs.push(r);
        }
    }
    for set in 1..=fx.cut_sets {
        let c = &ALIGNED_RANDOM_CUTS;
        let r = run_once(&xfs_ctx, fx, c, true, set)?;
        progress.say(format_args!(
            "{} {} | {} cold, cut set {set}/{}: {}",
            fx.role,
            size_label(fx.size),
            c.name,
            fx.cut_sets,
            run_line(&r)
        ));
        runs.push(r);
    }
    if !fx.no_readahead.is_empty() {
        let dev = dev
            .as_deref()
            .ok_or_else(|| anyhow!("no loop device for {}", mnt.display()))?;
        // One run: without readahead every page is a synchronous read (tens of seconds).
        let ra = Readahead::set(dev, 0)?;
        for c in &fx.no_readahead {
            let r = run_once(ctx_for(c)?, fx, c, true, 1)?;
            progress.say(format_args!(
                "{} {} | {} cold 1/1: {}",
                fx.role,
                size_label(fx.size),
                c.name,
                run_line(&r)
            ));
            runs.push(r);
        }
        drop(ra);
    }
    drop(plain);
    drop(mount);
    Ok(FixtureResult { info, runs })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn component_names() {
        assert_eq!(component_name(Path::new("/x/nb-1-big-Data.db")), "Data.db");
    }
}
