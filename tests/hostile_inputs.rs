//! Hostile-input campaign: mutated sstables (truncations, flipped header and body bytes,
//! zeroed regions, appended garbage, swapped components, decreasing chunk offsets, huge
//! lengths, symlinks to /etc/passwd, /dev/zero and outside the directory, dangling links,
//! FIFOs, directories in place of files, chmod 000 read by a non-root user, removed
//! components) over 20 real and generated sstables, each fed to `inspect`, `verify` or
//! `split --publish stage`.
//!
//! Every case must end in exit 0 that the independent checker (sstcheck.py) agrees with, or
//! exit 1 with a reason; never a panic, a signal or a hang (30 s timeout); the input
//! directory byte-identical after every run; nothing left in `--out` after a failure.
//! `CLEAVE_HOSTILE_CASES=N` (default 300) and `CLEAVE_HOSTILE_SEED`; `scripts/campaign.sh
//! hostile` runs the full variant.
// Always true here; said so that clippy.toml's allow-unwrap-in-tests covers the helpers too
// (rust-clippy#11119).
#![cfg(test)]

mod common;

use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::*;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Mutation {
    Truncate,
    FlipHeader,
    FlipBody,
    Zero,
    Append,
    Swap,
    DecreasingOffsets,
    HugeLength,
    LinkPasswd,
    LinkDevZero,
    LinkOutside,
    Dangling,
    Fifo,
    Directory,
    Chmod000,
    Remove,
}

const MUTATIONS: [Mutation; 16] = [
    Mutation::Truncate,
    Mutation::FlipHeader,
    Mutation::FlipBody,
    Mutation::Zero,
    Mutation::Append,
    Mutation::Swap,
    Mutation::DecreasingOffsets,
    Mutation::HugeLength,
    Mutation::LinkPasswd,
    Mutation::LinkDevZero,
    Mutation::LinkOutside,
    Mutation::Dangling,
    Mutation::Fifo,
    Mutation::Directory,
    Mutation::Chmod000,
    Mutation::Remove,
];

const OPS: [&str; 3] = ["inspect", "verify", "split"];

/// One source sstable: its directory and Data.db file name.
struct Source {
    dir: PathBuf,
    data: String,
}

/// 14 real sstables from the corpus (every supported version, compressed and not) and 6
/// generated ones.
fn sources(shared: &Path, keep: &mut Vec<tempfile::TempDir>) -> Vec<Source> {
    let mut rows: Vec<ManifestRow> = manifest(shared)
        .into_iter()
        .filter(|r| is_supported_big(r) && !is_damaged(r) && !r.invalid)
        .collect();
    rows.sort_by_key(|r| std::fs::metadata(&r.data_db).map(|m| m.len()).unwrap_or(0));
    // One per (version, compression) first, then the next smallest, up to 14.
    let mut by_version: BTreeMap<(String, bool), usize> = BTreeMap::new();
    let mut out = Vec::new();
    for round in 1..=3 {
        for r in &rows {
            let k = (r.version.clone(), r.compressed);
            let n = by_version.entry(k).or_default();
            if *n >= round || out.len() >= 14 {
                continue;
            }
            let src = Source {
                dir: r.data_db.parent().unwrap().to_path_buf(),
                data: r.data_db.file_name().unwrap().to_str().unwrap().to_string(),
            };
            if out
                .iter()
                .any(|o: &Source| o.dir == src.dir && o.data == src.data)
            {
                continue;
            }
            *n += 1;
            out.push(src);
        }
    }
    for extra in [
        ["ma", ""],
        ["me", "--uncompressed"],
        ["nb", ""],
        ["nb", "--uncompressed"],
        ["oa", ""],
        ["oa", "--random"],
    ] {
        let d = tempfile::tempdir().unwrap();
        let mut args: Vec<&str> = vec![
            "gen",
            "--size",
            "96KiB",
            "--partition-size",
            "1KiB",
            "--row-size",
            "128",
            "--chunk",
            "4KiB",
            "--version",
            extra[0],
        ];
        if !extra[1].is_empty() {
            args.push(extra[1]);
        }
        let o = Command::new(cleave_bin())
            .args(&args)
            .arg("--out")
            .arg(d.path())
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        std::fs::remove_file(d.path().join("schema.cql")).ok();
        out.push(Source {
            dir: d.path().to_path_buf(),
            data: format!("{}-1-big-Data.db", extra[0]),
        });
        keep.push(d);
    }
    out
}

/// What a directory holds, without following links or opening FIFOs: name, kind, mode and
/// (regular files) bytes.
fn state(dir: &Path) -> Vec<(String, String, u32, Vec<u8>)> {
    let mut v = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let n = e.file_name().into_string().unwrap();
        let m = std::fs::symlink_metadata(e.path()).unwrap();
        let t = m.file_type();
        let (kind, bytes) = if t.is_symlink() {
            (
                format!("link {:?}", std::fs::read_link(e.path()).unwrap()),
                Vec::new(),
            )
        } else if t.is_dir() {
            ("dir".to_string(), Vec::new())
        } else if t.is_file() {
            ("file".to_string(), std::fs::read(e.path()).unwrap())
        } else {
            ("special".to_string(), Vec::new())
        };
        v.push((n, kind, m.mode(), bytes));
    }
    v.sort();
    v
}

fn mutate(m: Mutation, rng: &mut Rng, case: &Path, comps: &[String], prefix: &str) -> String {
    let pick = |rng: &mut Rng| comps[rng.below(comps.len())].clone();
    let mut c = pick(rng);
    if m == Mutation::DecreasingOffsets {
        if comps.iter().any(|x| x == "CompressionInfo.db") {
            c = "CompressionInfo.db".into();
        } else {
            c = "Index.db".into();
        }
    }
    let p = case.join(format!("{prefix}{c}"));
    let mut b = std::fs::read(&p).unwrap();
    let len = b.len();
    match m {
        Mutation::Truncate => b.truncate(rng.below(len)),
        Mutation::FlipHeader if len > 0 => {
            let i = rng.below(len.min(64));
            b[i] ^= 1 << rng.below(8);
        }
        Mutation::FlipBody if len > 0 => {
            let i = rng.below(len);
            b[i] ^= 1 << rng.below(8);
        }
        Mutation::Zero if len > 0 => {
            let s = rng.below(len);
            let n = (1 + rng.below(512)).min(len - s);
            b[s..s + n].fill(0);
        }
        Mutation::Append => {
            for _ in 0..1 + rng.below(256) {
                b.push(rng.next() as u8);
            }
        }
        Mutation::DecreasingOffsets if len >= 32 => {
            // Offsets are the trailing 8-byte words of CompressionInfo.db: swap two
            // adjacent ones so they decrease (or scramble Index.db's tail likewise).
            let j = rng.below((len / 8 - 2).min(4));
            let a = len - 8 * (j + 2);
            let (x, y) = b[a..a + 16].split_at_mut(8);
            x.swap_with_slice(y);
        }
        Mutation::HugeLength if len >= 4 => {
            let at = rng.below(len.min(48) - 3);
            b[at..at + 4].copy_from_slice(&[0x7f, 0xff, 0xff, 0xff]);
        }
        Mutation::Swap => {
            let other = pick(rng);
            let q = case.join(format!("{prefix}{other}"));
            let ob = std::fs::read(&q).unwrap();
            std::fs::write(&q, &b).unwrap();
            b = ob;
            c = format!("{c}<->{other}");
        }
        Mutation::LinkPasswd
        | Mutation::LinkDevZero
        | Mutation::LinkOutside
        | Mutation::Dangling => {
            std::fs::remove_file(&p).unwrap();
            let target = match m {
                Mutation::LinkPasswd => PathBuf::from("/etc/passwd"),
                Mutation::LinkDevZero => PathBuf::from("/dev/zero"),
                Mutation::LinkOutside => {
                    let o = case.parent().unwrap().join("elsewhere");
                    std::fs::create_dir_all(&o).unwrap();
                    std::fs::write(o.join(&c), &b).unwrap();
                    o.join(&c)
                }
                _ => case.join("nonexistent"),
            };
            std::os::unix::fs::symlink(&target, &p).unwrap();
            return format!("{m:?} {c}");
        }
        Mutation::Fifo => {
            std::fs::remove_file(&p).unwrap();
            let cs = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
            // SAFETY: a valid C string.
            assert_eq!(unsafe { libc::mkfifo(cs.as_ptr(), 0o644) }, 0);
            return format!("{m:?} {c}");
        }
        Mutation::Directory => {
            std::fs::remove_file(&p).unwrap();
            std::fs::create_dir(&p).unwrap();
            return format!("{m:?} {c}");
        }
        Mutation::Chmod000 => {
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o000)).unwrap();
            return format!("{m:?} {c}");
        }
        Mutation::Remove => {
            std::fs::remove_file(&p).unwrap();
            return format!("{m:?} {c}");
        }
        _ => {}
    }
    std::fs::write(&p, &b).unwrap();
    format!("{m:?} {c}")
}

fn run_with_timeout(c: &mut Command, secs: u64) -> Result<Output, String> {
    let mut child = c
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if child.try_wait().unwrap().is_some() {
            return Ok(child.wait_with_output().unwrap());
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("hung for {secs} s"));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn mutated_sstables_end_in_a_checked_success_or_a_clear_reason() {
    let Some(shared) = corpus_or_skip("hostile") else {
        return;
    };
    let cases: usize = std::env::var("CLEAVE_HOSTILE_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(300);
    let seed: u64 = std::env::var("CLEAVE_HOSTILE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_0012);
    let root_user = unsafe { libc::geteuid() } == 0;
    let mut keep = Vec::new();
    let srcs = sources(&shared, &mut keep);
    assert!(srcs.len() >= 20, "{} sources", srcs.len());
    let mut rng = Rng(seed | 1);
    let start = Instant::now();
    let mut outcomes: BTreeMap<String, usize> = BTreeMap::new();
    let mut violations = Vec::new();
    // Successes to judge with sstcheck at the end, in one run: (case, paths).
    let mut judge: Vec<(String, Vec<PathBuf>)> = Vec::new();
    let work = tempfile::tempdir().unwrap();
    std::fs::set_permissions(work.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    for i in 0..cases {
        let src = &srcs[i % srcs.len()];
        let m = MUTATIONS[rng.below(MUTATIONS.len())];
        let op = OPS[(i / srcs.len() + i) % OPS.len()];
        let case_root = work.path().join(format!("case{i}"));
        let case = case_root.join("in");
        let out = case_root.join("out");
        std::fs::create_dir_all(&case).unwrap();
        std::fs::create_dir_all(&out).unwrap();
        let prefix = src.data.strip_suffix("Data.db").unwrap();
        let mut comps = Vec::new();
        for e in std::fs::read_dir(&src.dir).unwrap() {
            let n = e.unwrap().file_name().into_string().unwrap();
            if let Some(c) = n.strip_prefix(prefix) {
                std::fs::write(case.join(&n), std::fs::read(src.dir.join(&n)).unwrap()).unwrap();
                comps.push(c.to_string());
            }
        }
        comps.sort();
        let what = mutate(m, &mut rng, &case, &comps, prefix);
        let as_nobody = m == Mutation::Chmod000;
        if as_nobody && !root_user {
            *outcomes
                .entry("skipped (chmod 000 needs root to switch to nobody)".into())
                .or_default() += 1;
            continue;
        }
        for d in [&case_root, &case, &out] {
            std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o777)).unwrap();
        }
        let before = state(&case);
        let data = case.join(&src.data);
        let mut c = Command::new(cleave_bin());
        match op {
            "split" => c
                .arg("split")
                .arg(&data)
                .arg("--out")
                .arg(&out)
                .args(["--parts", "2", "--json"]),
            _ => c.arg(op).arg(&data),
        };
        if as_nobody {
            c.uid(65534).gid(65534);
        }
        let label = format!("case {i} {op} {} {what}", src.data);
        let o = match run_with_timeout(&mut c, 30) {
            Ok(o) => o,
            Err(e) => {
                violations.push(format!("{label}: {e}"));
                continue;
            }
        };
        let err = String::from_utf8_lossy(&o.stderr).to_string();
        let stdout = String::from_utf8_lossy(&o.stdout).to_string();
        if err.contains("panicked") || o.status.code().is_none_or(|c| c != 0 && c != 1) {
            violations.push(format!("{label}: {:?} {err}", o.status));
            continue;
        }
        if state(&case) != before {
            violations.push(format!("{label}: the input directory changed"));
        }
        if o.status.success() {
            *outcomes.entry(format!("{op} ok")).or_default() += 1;
            match op {
                "split" => {
                    let v: serde_json::Value = match serde_json::from_str(&stdout) {
                        Ok(v) => v,
                        Err(e) => {
                            violations.push(format!("{label}: split printed no JSON: {e}"));
                            continue;
                        }
                    };
                    let kids: Vec<PathBuf> = v["children"]
                        .as_array()
                        .map(|a| {
                            a.iter()
                                .map(|c| PathBuf::from(c["path"].as_str().unwrap_or("")))
                                .collect()
                        })
                        .unwrap_or_default();
                    judge.push((format!("{label}\u{0}{}", data.display()), kids));
                }
                // verify and inspect passed a mutated sstable: sstcheck must agree (a
                // mutation of a component it does not read may be harmless).
                _ => judge.push((label, vec![data.clone()])),
            }
        } else {
            // `verify` and `split --json` report a failure on stdout (split as
            // `{"error": {"reason", …}}`), `inspect` on stderr.
            let reason = if op == "inspect" { &err } else { &stdout };
            if !(reason.contains("error") || reason.contains("FAILED")) || reason.trim().is_empty()
            {
                violations.push(format!("{label}: exit 1 without a reason: {err}{stdout}"));
            }
            *outcomes.entry(format!("{op} refused")).or_default() += 1;
            let left: Vec<_> = std::fs::read_dir(&out).unwrap().collect();
            if !left.is_empty() {
                violations.push(format!("{label}: {} entries left in --out", left.len()));
            }
        }
    }
    // The independent judge, once over every success.
    let paths: Vec<PathBuf> = judge.iter().flat_map(|(_, p)| p.clone()).collect();
    if !paths.is_empty() {
        let sstcheck = shared.join("tools/sstcheck.py");
        let o = Command::new("python3")
            .arg(&sstcheck)
            .args(&paths)
            .output()
            .unwrap();
        let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        assert_eq!(
            lines.len(),
            paths.len(),
            "sstcheck: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let mut k = 0;
        for (label, ps) in &judge {
            let (label, parent) = label.split_once('\u{0}').unwrap_or((label, ""));
            for p in ps {
                if lines[k]["ok"] != true {
                    // The one documented exception (docs/split.md, docs/reliability.md):
                    // interior chunks are carried without being read, so a corrupt one
                    // stays corrupt in the child — still failing its own CRC, never
                    // laundered. Only when the parent fails `cleave verify` on a chunk
                    // checksum and every sstcheck error is a chunk error.
                    let errs = lines[k]["errors"].to_string();
                    let chunk_only = lines[k]["errors"].as_array().is_some_and(|a| {
                        a.iter().all(|e| {
                            let e = e.as_str().unwrap_or("");
                            e.contains("crc mismatch") || e.contains("Decompression failed")
                        })
                    });
                    let parent_fails = !parent.is_empty() && {
                        let o = Command::new(cleave_bin())
                            .arg("verify")
                            .arg(parent)
                            .output()
                            .unwrap();
                        !o.status.success()
                            && String::from_utf8_lossy(&o.stdout)
                                .contains("checksum mismatch in chunk")
                    };
                    if chunk_only && parent_fails {
                        *outcomes
                            .entry("split ok, carried a corrupt interior chunk (detectable)".into())
                            .or_default() += 1;
                    } else {
                        violations.push(format!(
                            "{label}: cleave accepted {} but sstcheck rejects it: {errs}",
                            p.display()
                        ));
                    }
                }
                k += 1;
            }
        }
    }
    eprintln!(
        "hostile campaign (seed {seed}): {cases} cases over {} sstables, {:?}, {} judged by sstcheck, {} violations, {:.1} s",
        srcs.len(),
        outcomes,
        paths.len(),
        violations.len(),
        start.elapsed().as_secs_f64()
    );
    assert!(violations.is_empty(), "{violations:#?}");
}
