//! `cleave apply-pending` against what it finds on a data volume that cleave did not write
//! (issue 31, items 1, 2, 11, 12, 13): a symlinked `.cleave-pending` or job directory, a
//! job directory holding foreign files, hand-edited intents, a symlinked table directory,
//! the staging a killed on-restart split leaves, an intent of a newer format. Each run is
//! judged by the tree it leaves: a refusal changes nothing (every name, link and byte under
//! the data directory and the directories outside it, compared before and after), a hostile
//! intent publishes nothing (the live sstables byte for byte as they were), and what is
//! published adds up to the parent's keys.
// Always true here; said so that clippy.toml's allow-unwrap-in-tests covers the helpers too
// (rust-clippy#11119).
#![cfg(test)]

mod common;

use std::collections::BTreeMap;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;

const T1: &str = "t1-0123456789abcdef0123456789abcdef";
const T2: &str = "t2-fedcba9876543210fedcba9876543210";

/// Every name under `dir`, links not followed: a directory as `dir`, a link as its target,
/// a file as its length and CRC32.
fn tree(dir: &Path) -> BTreeMap<PathBuf, String> {
    let mut m = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let md = std::fs::symlink_metadata(&p).unwrap();
            let v = if md.file_type().is_symlink() {
                format!("-> {}", std::fs::read_link(&p).unwrap().display())
            } else if md.is_dir() {
                stack.push(p.clone());
                "dir".to_string()
            } else {
                let b = std::fs::read(&p).unwrap();
                format!("{} bytes crc {:08x}", b.len(), crc32fast::hash(&b))
            };
            m.insert(p.strip_prefix(dir).unwrap().to_path_buf(), v);
        }
    }
    m
}

/// The live files of a table (its pending directory and other hidden names left out).
fn live_tree(table: &Path) -> BTreeMap<PathBuf, String> {
    let mut t = tree(table);
    t.retain(|p, _| !p.to_string_lossy().starts_with('.'));
    t
}

/// `<root>/data/ks/{t1,t2}`, one 256 KiB sstable (generation 1) each, seeded apart.
fn world(root: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let data = root.join("data");
    let t1 = data.join("ks").join(T1);
    let t2 = data.join("ks").join(T2);
    gen_table(&t1, &[(1, "256KiB")]);
    gen_table(&t2, &[(2, "256KiB")]);
    (data, t1, t2)
}

/// `split --publish on-restart` of `table`'s sstable generation `gen` into 3 children.
fn pend_cmd(table: &Path, gen: u32, uid: &str) -> Command {
    let mut c = Command::new(cleave_bin());
    c.arg("split")
        .arg(table.join(format!("nb-{gen}-big-Data.db")))
        .arg("--out")
        .arg(table)
        .args([
            "--parts",
            "3",
            "--publish",
            "on-restart",
            "--job-uid",
            uid,
            "--json",
        ]);
    c
}

fn pend(table: &Path, gen: u32, uid: &str) {
    let out = pend_cmd(table, gen, uid).output().unwrap();
    assert!(
        out.status.success(),
        "pend: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn intent_path(table: &Path, uid: &str) -> PathBuf {
    table.join(".cleave-pending").join(uid).join("intent.json")
}

fn read_json(p: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap()
}

fn write_json(p: &Path, v: &serde_json::Value) {
    std::fs::write(p, serde_json::to_vec_pretty(v).unwrap()).unwrap();
}

/// apply-pending (or `--dry-run`) expected to refuse the whole run: its reason.
fn apply_refused(data: &Path, dry_run: bool) -> String {
    let mut c = apply_pending(data);
    if dry_run {
        c.arg("--dry-run");
    }
    let out = c.output().unwrap();
    let so = String::from_utf8_lossy(&out.stdout);
    assert!(
        !out.status.success(),
        "apply-pending (dry run {dry_run}) went through: {so}"
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v["error"]["reason"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// A `.cleave-pending` that is a symlink — to the keyspace directory, as in the issue, or
/// to a directory outside the data directory (a snapshot) — and a job directory that is a
/// symlink refuse the whole run with `InvalidRequest`, dry run or not, and change nothing
/// anywhere, though another table has a genuine intent. A job directory with no intent
/// that holds anything but a job's names is left alone, not removed.
///
/// Seen failing on the code before the fix (this test binary run against the old `cleave`
/// binary): with `.cleave-pending -> ..` the old dry run exited 0 listing both table
/// directories of the keyspace as `removed_incomplete` jobs.
#[test]
fn symlinked_pending_or_job_directories_are_refused_and_change_nothing() {
    let root = tempfile::tempdir().unwrap();
    let (data, t1, t2) = world(root.path());
    pend(&t1, 1, "genuine");
    let outside = root.path().join("snapshots");
    std::fs::create_dir_all(outside.join("snap-1").join("sub")).unwrap();
    std::fs::write(outside.join("snap-1").join("sub").join("f"), b"keep me").unwrap();

    let links: [(&str, PathBuf); 2] = [("..", PathBuf::from("..")), ("outside", outside.clone())];
    for (what, target) in links {
        let link = t2.join(".cleave-pending");
        symlink(&target, &link).unwrap();
        let before = (tree(&data), tree(&outside));
        for dry_run in [true, false] {
            assert_eq!(
                apply_refused(&data, dry_run),
                "InvalidRequest",
                "{what}, dry run {dry_run}"
            );
            assert_eq!((tree(&data), tree(&outside)), before, "{what}: changed");
        }
        std::fs::remove_file(&link).unwrap();
    }

    // A job directory that is a link (here to the other table) in a real pending directory.
    std::fs::create_dir(t2.join(".cleave-pending")).unwrap();
    symlink(
        Path::new("../..").join(T1),
        t2.join(".cleave-pending").join("job-link"),
    )
    .unwrap();
    let before = tree(&data);
    assert_eq!(apply_refused(&data, false), "InvalidRequest");
    assert_eq!(tree(&data), before, "job link: changed");
    std::fs::remove_file(t2.join(".cleave-pending").join("job-link")).unwrap();

    // A job directory without an intent holding what is not a job's: left alone.
    let foreign = t2.join(".cleave-pending").join("foreign");
    std::fs::create_dir_all(foreign.join("snapshots")).unwrap();
    std::fs::copy(
        t2.join("nb-2-big-Data.db"),
        foreign.join("nb-2-big-Data.db"),
    )
    .unwrap();
    let before = tree(&foreign);
    let r = apply_pending_ok(&data);
    let jobs = r["jobs"].as_array().unwrap();
    let left: Vec<_> = jobs
        .iter()
        .filter(|j| j["action"] == "left_alone")
        .collect();
    assert_eq!(left.len(), 1, "{r}");
    assert_eq!(left[0]["reason"], "InvalidRequest", "{r}");
    assert_eq!(tree(&foreign), before, "the foreign job directory changed");
    // The genuine job was published all the same.
    let o = read_json(&t1.join(".cleave-pending/genuine/outcome.json"));
    assert_eq!(o["result"]["state"], "Complete", "{o}");
}

/// One hand edit of a pended intent (t1's parent split into 3, job `j`), the other table
/// and a directory outside as material: `edit(intent, t1, t2, outside)`.
type Edit = fn(&mut serde_json::Value, &Path, &Path, &Path);

fn identity(data_db: &Path) -> serde_json::Value {
    serde_json::to_value(cleave::split::intent::parent_identity(data_db).unwrap()).unwrap()
}

/// The intent's entry for an existing sstable as a child in `children_dir`.
fn child_entry(data_db: &Path) -> serde_json::Value {
    let dir = data_db.parent().unwrap();
    let name = data_db.file_name().unwrap().to_str().unwrap();
    let prefix = name.strip_suffix("Data.db").unwrap();
    let files: Vec<serde_json::Value> = names(dir)
        .into_iter()
        .filter(|n| n.starts_with(prefix))
        .map(|n| {
            let size = std::fs::metadata(dir.join(&n)).unwrap().len();
            serde_json::json!({"name": n, "size": size})
        })
        .collect();
    let partitions = index_keys(data_db).len();
    serde_json::json!({
        "data_file": name, "files": files, "partitions": partitions,
        "repaired_at": null, "pending_repair": null,
    })
}

/// Each of the hand edits is refused by apply-pending as an invalid request
/// (`InvalidRequest`, or `CheckFailed` where only the keys tell), with nothing published:
/// both tables' live files and the directory outside byte for byte as before, and the
/// job's outcome recorded as Failed.
///
/// Seen failing on the code before the fix (this test binary run against the old `cleave`
/// binary): all nine cases ended `Complete`, and in every one the live files changed.
#[test]
fn hand_edited_intents_publish_nothing() {
    let cases: Vec<(&str, &str, Edit)> = vec![
        ("parent listed twice", "InvalidRequest", |i, _, _, _| {
            let p = i["parents"][0].clone();
            i["parents"].as_array_mut().unwrap().push(p);
        }),
        ("child listed twice", "InvalidRequest", |i, _, _, _| {
            let c = i["parents"][0]["children"][0].clone();
            i["parents"][0]["children"].as_array_mut().unwrap().push(c);
        }),
        ("child without TOC.txt", "InvalidRequest", |i, _, _, _| {
            let f = i["parents"][0]["children"][0]["files"]
                .as_array_mut()
                .unwrap();
            f.retain(|f| !f["name"].as_str().unwrap().ends_with("TOC.txt"));
        }),
        ("child without Data.db", "InvalidRequest", |i, _, _, _| {
            let f = i["parents"][0]["children"][0]["files"]
                .as_array_mut()
                .unwrap();
            f.retain(|f| !f["name"].as_str().unwrap().ends_with("Data.db"));
        }),
        (
            "anticompaction with no children",
            "InvalidRequest",
            |i, _, _, _| {
                i["operation"] = "anticompaction".into();
                i["parents"][0]["children"] = serde_json::json!([]);
                i["parents"][0]["children_dir"] = "".into();
            },
        ),
        (
            "parent in another table",
            "InvalidRequest",
            |i, _, t2, _| {
                let mut id = identity(&t2.join("nb-2-big-Data.db"));
                id["data_file"] = format!("../{T2}/nb-2-big-Data.db").into();
                i["parents"][0]["parent"] = id;
            },
        ),
        (
            "parent outside the data directory",
            "InvalidRequest",
            |i, _, _, out| {
                let d = out.join("nb-3-big-Data.db");
                let mut id = identity(&d);
                id["data_file"] = d.to_str().unwrap().into();
                i["parents"][0]["parent"] = id;
            },
        ),
        (
            "children_dir in another table",
            "InvalidRequest",
            |i, _, t2, _| {
                // The other table's sstable as this parent's only child.
                i["parents"][0]["children_dir"] = format!("../../../{T2}").into();
                i["parents"][0]["children"] =
                    serde_json::json!([child_entry(&t2.join("nb-2-big-Data.db"))]);
                i["parents"][0]
                    .as_object_mut()
                    .unwrap()
                    .remove("fingerprint");
            },
        ),
        (
            "children's keys not what was checked",
            "CheckFailed",
            |i, _, _, _| {
                // The fingerprint checked at staging, with one key more.
                let fp = &mut i["parents"][0]["fingerprint"];
                if fp.is_null() {
                    // An intent of the old format has none: its partition counts tell.
                    let c = &mut i["parents"][0]["children"][0]["partitions"];
                    *c = (c.as_u64().unwrap() + 1).into();
                } else {
                    fp["count"] = (fp["count"].as_u64().unwrap() + 1).into();
                }
            },
        ),
    ];
    let mut failures = Vec::new();
    for (what, reason, edit) in cases {
        let root = tempfile::tempdir().unwrap();
        let (data, t1, t2) = world(root.path());
        let outside = root.path().join("outside");
        gen_table(&outside, &[(3, "256KiB")]);
        pend(&t1, 1, "j");
        let ip = intent_path(&t1, "j");
        let mut intent = read_json(&ip);
        edit(&mut intent, &t1, &t2, &outside);
        write_json(&ip, &intent);
        let before = (live_tree(&t1), tree(&t2), tree(&outside));
        let r = apply_pending_ok(&data);
        let after = (live_tree(&t1), tree(&t2), tree(&outside));
        let o = read_json(&t1.join(".cleave-pending/j/outcome.json"));
        let got = (
            o["result"]["state"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            o["result"]["reason"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        );
        if got != ("Failed".to_string(), reason.to_string()) {
            failures.push(format!(
                "{what}: outcome {got:?}, expected Failed {reason}: {r}"
            ));
        }
        if after != before {
            failures.push(format!("{what}: the live files changed"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A split or a cleanup with `--publish on-restart` killed once its children are written
/// leaves `.cleave-staging-*` in the table directory and no intent; the next apply-pending
/// removes it (listing it in `stale_staging`), touching no live file, and the one after
/// finds nothing.
///
/// Seen failing on the code before the fix (this test binary run against the old `cleave`
/// binary): `"tables": 0`, no `stale_staging`, the staging directory left.
#[test]
fn a_killed_on_restart_split_or_cleanup_leaves_no_staging_after_apply_pending() {
    let staging = |t: &Path| -> Vec<String> {
        names(t)
            .into_iter()
            .filter(|n| n.starts_with(".cleave-staging-"))
            .collect()
    };
    for what in ["split", "cleanup"] {
        let root = tempfile::tempdir().unwrap();
        let (data, t1, _t2) = world(root.path());
        let before = live_tree(&t1);
        let mut cmd = if what == "split" {
            pend_cmd(&t1, 1, "killed")
        } else {
            // Half the ring owned: the sstable is split, not kept or dropped.
            let owned = root.path().join("owned.yaml");
            std::fs::write(&owned, "- {start: \"-9223372036854775808\", end: \"0\"}\n").unwrap();
            let mut c = Command::new(cleave_bin());
            c.arg("cleanup")
                .arg(&t1)
                .arg("--owned-ranges")
                .arg(&owned)
                .args(["--publish", "on-restart", "--job-uid", "killed", "--json"]);
            c
        };
        let out = cmd
            .env("CLEAVE_CRASH_AT", "split:written")
            .output()
            .unwrap();
        assert!(
            !out.status.success(),
            "{what} was not killed: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        assert_eq!(staging(&t1).len(), 1, "{what}: {:?}", names(&t1));
        let r = apply_pending_ok(&data);
        assert_eq!(
            r["stale_staging"].as_array().map(|a| a.len()),
            Some(1),
            "{what}: {r}"
        );
        assert!(staging(&t1).is_empty(), "{what}: left {:?}", names(&t1));
        assert_eq!(live_tree(&t1), before, "{what}");
        let r = apply_pending_ok(&data);
        assert_eq!(
            r["stale_staging"].as_array().map(|a| a.len()),
            Some(0),
            "{what}: {r}"
        );
    }
}

/// A table directory that is a symlink to another disk (here another directory), as
/// Cassandra's `Directories` follows it: its intent is found and published, the parent
/// replaced by children with the same keys.
///
/// Seen failing on the code before the fix (this test binary run against the old `cleave`
/// binary): `"tables": 0`, no job, exit 0, the intent left waiting.
#[test]
fn a_symlinked_table_directory_is_published() {
    let root = tempfile::tempdir().unwrap();
    let (data, _t1, _t2) = world(root.path());
    let disk = root.path().join("disk2").join(T1);
    gen_table(&disk, &[(4, "256KiB")]);
    std::fs::remove_dir_all(data.join("ks").join(T1)).unwrap();
    symlink(&disk, data.join("ks").join(T1)).unwrap();
    let via_link = data.join("ks").join(T1);
    let fp = dir_fingerprint(&disk);
    pend(&via_link, 4, "moved");
    let r = apply_pending_ok(&data);
    assert_eq!(r["tables"], 1, "{r}");
    let o = read_json(&disk.join(".cleave-pending/moved/outcome.json"));
    assert_eq!(o["result"]["state"], "Complete", "{o}");
    assert!(!disk.join("nb-4-big-Data.db").exists());
    assert_eq!(data_files(&disk).len(), 3, "{:?}", names(&disk));
    assert_eq!(dir_fingerprint(&disk), fp);
}

/// An intent of a newer format (after an image rollback) is left as it is: the job is
/// reported `left_alone` with `InvalidRequest`, exit 0, and its directory (intent and
/// children) and the table are byte for byte as before; a dry run says the same.
///
/// Seen failing on the code before the fix (this test binary run against the old `cleave`
/// binary): the dry run already said `would_apply` a `Failed` outcome ("the job's staged
/// children were removed"), which the real run then wrote.
#[test]
fn a_newer_format_intent_is_left_alone() {
    let root = tempfile::tempdir().unwrap();
    let (data, t1, _t2) = world(root.path());
    pend(&t1, 1, "future");
    let ip = intent_path(&t1, "future");
    let mut intent = read_json(&ip);
    intent["version"] = 2.into();
    intent["something_new"] = serde_json::json!({"meaning": "unknown to this cleave"});
    write_json(&ip, &intent);
    let before = tree(&data);
    for dry_run in [true, false] {
        let mut c = apply_pending(&data);
        if dry_run {
            c.arg("--dry-run");
        }
        let out = c.output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(r["jobs"][0]["action"], "left_alone", "{r}");
        assert_eq!(r["jobs"][0]["reason"], "InvalidRequest", "{r}");
        assert_eq!(tree(&data), before, "dry run {dry_run}: changed");
    }
}
