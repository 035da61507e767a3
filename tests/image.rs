//! The container image as `scripts/build-image.sh` builds it on a machine without a container
//! engine: an OCI archive whose config `skopeo` (an independent reader of the format) shows
//! with user 999 and the org.opencontainers.image.* labels, and whose unpacked filesystem
//! (`umoci unpack`, another independent reader) runs cleave by `chroot`: `--version`, `crd`
//! and the whole `demo`, as UID 999, with only the image's own libraries and no shell. The
//! layer itself is read whole by two tar readers that did not write it (GNU tar and Python's
//! `tarfile`), and every digest the layout names is the sha256 of the blob it names.
// Always true here; said so that clippy.toml's allow-unwrap-in-tests covers the helpers too
// (rust-clippy#11119).
#![cfg(test)]

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::cleave_bin;
use common::k8s::{ok_piped as ok, run_piped as run};
use serde_json::Value;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Root (chroot), apt-get (the .debs) and the Debian tools the script uses, or why not.
fn tools_or_skip() -> bool {
    if !nix::unistd::Uid::effective().is_root() {
        eprintln!("SKIP image: chroot needs root (scripts/test.sh runs as root in CI)");
        return false;
    }
    let missing: Vec<&str> = ["apt-get", "dpkg-deb", "strip", "umoci", "skopeo"]
        .into_iter()
        .filter(|t| !have(t))
        .collect();
    if !missing.is_empty() {
        eprintln!(
            "SKIP image: no {missing:?} (scripts/test.sh installs umoci, skopeo and binutils)"
        );
        return false;
    }
    true
}

fn crate_version() -> String {
    let cargo = std::fs::read_to_string(repo().join("Cargo.toml")).unwrap();
    cargo
        .lines()
        .find_map(|l| l.strip_prefix("version = "))
        .unwrap()
        .trim_matches('"')
        .to_string()
}

fn build_image(out: &Path) {
    let mut c = Command::new(repo().join("scripts/build-image.sh"));
    // The binary this test run built (cargo holds target/'s lock while tests run, so the
    // script must not run cargo itself).
    c.env("CLEAVE_BINARY", cleave_bin())
        .env("CLEAVE_IMAGE", out);
    let said = ok(c, None);
    eprintln!("{said}");
}

fn chroot(root: &Path, args: &[&str]) -> std::process::Output {
    // Resolved here: with the environment cleared, the child's PATH is the image's.
    let which = Command::new("sh")
        .args(["-c", "command -v chroot"])
        .output()
        .unwrap();
    let chroot = String::from_utf8_lossy(&which.stdout).trim().to_string();
    let mut c = Command::new(chroot);
    // As the image's user, with the image's environment only.
    c.arg("--userspec=999:999")
        .arg(root)
        .arg("/usr/local/bin/cleave")
        .args(args)
        .env_clear()
        .env("PATH", "/usr/local/bin")
        .env("TMPDIR", "/tmp");
    run(c, None)
}

#[test]
fn image_builds_without_a_container_engine_and_runs_from_its_own_filesystem() {
    if !tools_or_skip() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let archive = tmp.path().join("cleave.oci.tar");
    build_image(&archive);
    let size = std::fs::metadata(&archive).unwrap().len();
    eprintln!("image archive: {size} bytes");
    let version = crate_version();
    let revision = {
        let mut c = Command::new("git");
        c.arg("-C").arg(repo()).args(["rev-parse", "HEAD"]);
        ok(c, None).trim().to_string()
    };

    // The config as skopeo reads it from the archive: user, entrypoint, labels.
    let reference = format!("oci-archive:{}:{version}", archive.display());
    let inspect = |extra: &[&str]| -> Value {
        let mut c = Command::new("skopeo");
        c.arg("inspect").args(extra).arg(&reference);
        serde_json::from_str(&ok(c, None)).unwrap()
    };
    let config = inspect(&["--config"]);
    assert_eq!(config["config"]["User"], "999:999", "{config}");
    assert_eq!(
        config["config"]["Entrypoint"],
        serde_json::json!(["/usr/local/bin/cleave"]),
        "{config}"
    );
    assert_eq!(config["os"], "linux");
    let info = inspect(&[]);
    let labels = &info["Labels"];
    assert_eq!(labels["org.opencontainers.image.version"], version.as_str());
    let rev = labels["org.opencontainers.image.revision"]
        .as_str()
        .unwrap();
    assert!(
        rev == revision || rev == format!("{revision}-dirty"),
        "revision label {rev}, HEAD {revision}"
    );
    for k in ["title", "licenses", "created", "source"] {
        assert!(
            labels[format!("org.opencontainers.image.{k}")].is_string(),
            "no org.opencontainers.image.{k}: {labels}"
        );
    }
    assert_eq!(
        info["Layers"].as_array().map(Vec::len),
        Some(1),
        "one layer: {info}"
    );

    // Unpacked by umoci from the archive's layout.
    let layout = tmp.path().join("layout");
    std::fs::create_dir_all(&layout).unwrap();
    let mut c = Command::new("tar");
    c.arg("-xf").arg(&archive).arg("-C").arg(&layout);
    ok(c, None);
    let bundle = tmp.path().join("bundle");
    let mut c = Command::new("umoci");
    c.args(["unpack", "--image"])
        .arg(format!("{}:{version}", layout.display()))
        .arg(&bundle);
    ok(c, None);
    let root = bundle.join("rootfs");

    // No shell, no package manager, no other program: the one executable that is not a
    // shared library or the loader is cleave.
    let mut programs = Vec::new();
    let mut stack = vec![root.clone()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let p = e.path();
            let ft = e.file_type().unwrap();
            if ft.is_dir() {
                stack.push(p);
            } else if ft.is_file() {
                use std::os::unix::fs::PermissionsExt;
                let mode = e.metadata().unwrap().permissions().mode();
                let name = p.file_name().unwrap().to_string_lossy().into_owned();
                if mode & 0o111 != 0 && !name.contains(".so") {
                    programs.push(p.strip_prefix(&root).unwrap().to_path_buf());
                }
            }
        }
    }
    assert_eq!(
        programs,
        [PathBuf::from("usr/local/bin/cleave")],
        "the image holds programs besides cleave"
    );
    for sh in ["bin/sh", "bin/bash", "usr/bin/sh", "bin/busybox"] {
        assert!(!root.join(sh).exists(), "{sh} in the image");
    }
    let passwd = std::fs::read_to_string(root.join("etc/passwd")).unwrap();
    assert!(passwd.contains(":999:999:"), "{passwd}");

    // Run from the image's own filesystem, as UID 999: the loader and libraries are the
    // image's (a library missing from the image fails here).
    let out = chroot(&root, &["--version"]);
    assert!(out.status.success(), "{out:?}");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains(&version), "--version: {said}");
    let out = chroot(&root, &["crd"]);
    assert!(out.status.success(), "{out:?}");
    assert!(
        out.stdout == std::fs::read(repo().join("crds/cleave.dev.yaml")).unwrap(),
        "`cleave crd` in the image does not print crds/cleave.dev.yaml ({} bytes)",
        out.stdout.len()
    );
    // The demo writes under the image's /tmp (1777, as an emptyDir is in the chart's pods).
    let out = chroot(&root, &["demo", "--size", "4MiB"]);
    assert!(
        out.status.success(),
        "demo in the image: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.starts_with("AnticompactionJob demo-repair: Complete in "),
        "{said}"
    );
    assert!(said.contains("check     ok"), "{said}");
}

fn sha256_file(path: &Path) -> String {
    let mut c = Command::new("sha256sum");
    c.arg(path);
    let said = ok(c, None);
    format!("sha256:{}", said.split_whitespace().next().unwrap())
}

/// The blob a descriptor names, after checking that its bytes have the descriptor's digest
/// and size.
fn blob(layout: &Path, descriptor: &Value) -> PathBuf {
    let digest = descriptor["digest"].as_str().unwrap();
    let hex = digest.strip_prefix("sha256:").unwrap();
    let path = layout.join("blobs/sha256").join(hex);
    assert_eq!(
        sha256_file(&path),
        digest,
        "blob {} has another digest",
        path.display()
    );
    assert_eq!(
        Some(std::fs::metadata(&path).unwrap().len()),
        descriptor["size"].as_u64(),
        "blob {digest}: size differs from its descriptor {descriptor}"
    );
    path
}

/// Member names as the reader printed them, without the trailing `/` GNU tar gives
/// directories (tarfile does not).
fn names(listing: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut v: Vec<String> = listing
        .into_iter()
        .map(|n| n.trim_end_matches('/').to_string())
        .filter(|n| !n.is_empty())
        .collect();
    v.sort();
    v
}

/// The layer a kubelet's runtime pulls is a whole tar stream: GNU tar and Python's tarfile
/// (neither wrote it) list and extract it without an error, agree on its members, and the
/// binary either extracted runs from its own tree; the layout's digests (index, manifest,
/// config, layer, the config's diff_id) are those of the bytes they name. Issue 37 item 1:
/// umoci 0.4.7 `insert` cut the stream short ("Unexpected EOF in archive").
#[test]
fn image_layer_is_read_whole_by_gnu_tar_and_python_tarfile() {
    if !tools_or_skip() {
        return;
    }
    if !have("python3") || !have("gzip") {
        eprintln!("SKIP image layer readers: no python3 or gzip");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let archive = tmp.path().join("cleave.oci.tar");
    build_image(&archive);
    let layout = tmp.path().join("layout");
    std::fs::create_dir_all(&layout).unwrap();
    let mut c = Command::new("tar");
    c.arg("-xf").arg(&archive).arg("-C").arg(&layout);
    ok(c, None);

    // index.json -> manifest -> config and layer, each digest checked against its bytes.
    let index: Value =
        serde_json::from_slice(&std::fs::read(layout.join("index.json")).unwrap()).unwrap();
    let manifests = index["manifests"].as_array().unwrap();
    assert_eq!(manifests.len(), 1, "{index}");
    let manifest: Value =
        serde_json::from_slice(&std::fs::read(blob(&layout, &manifests[0])).unwrap()).unwrap();
    let config: Value =
        serde_json::from_slice(&std::fs::read(blob(&layout, &manifest["config"])).unwrap())
            .unwrap();
    let layers = manifest["layers"].as_array().unwrap();
    assert_eq!(layers.len(), 1, "{manifest}");
    assert_eq!(
        layers[0]["mediaType"], "application/vnd.oci.image.layer.v1.tar+gzip",
        "{manifest}"
    );
    let layer = blob(&layout, &layers[0]);
    let uncompressed = tmp.path().join("layer.tar");
    let mut c = Command::new("sh");
    c.args(["-c", "gzip -dc \"$1\" > \"$2\"", "sh"])
        .arg(&layer)
        .arg(&uncompressed);
    ok(c, None);
    assert_eq!(
        config["rootfs"]["diff_ids"],
        serde_json::json!([sha256_file(&uncompressed)]),
        "the config's diff_id is not the sha256 of the uncompressed layer"
    );
    // The stream ends where tar says a stream ends: whole 512-byte blocks, the last two of
    // them zero (the end-of-archive marker).
    let bytes = std::fs::read(&uncompressed).unwrap();
    assert_eq!(
        bytes.len() % 512,
        0,
        "the uncompressed layer ({} bytes) ends {} bytes into a 512-byte block",
        bytes.len(),
        bytes.len() % 512
    );
    assert!(
        bytes.len() >= 1024 && bytes[bytes.len() - 1024..].iter().all(|&b| b == 0),
        "the uncompressed layer has no end-of-archive blocks"
    );

    // Reader 1: GNU tar, listing and extracting the compressed blob; any complaint fails.
    let mut c = Command::new("tar");
    c.arg("-tzf").arg(&layer);
    let out = run(c, None);
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "GNU tar -t on the layer: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let gnu = names(
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_string),
    );
    let gnu_root = tmp.path().join("gnu-rootfs");
    std::fs::create_dir_all(&gnu_root).unwrap();
    let mut c = Command::new("tar");
    c.arg("-xzf").arg(&layer).arg("-C").arg(&gnu_root);
    let out = run(c, None);
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "GNU tar -x of the layer: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Reader 2: Python's tarfile, reading every member and extracting them (as a trusted
    // archive: the image has absolute symlinks such as /lib64's loader).
    let py_root = tmp.path().join("py-rootfs");
    std::fs::create_dir_all(&py_root).unwrap();
    let script = r#"
import json, sys, tarfile
with tarfile.open(sys.argv[1], "r:gz") as t:
    members = t.getmembers()
    kw = {"filter": "fully_trusted"} if hasattr(tarfile, "fully_trusted_filter") else {}
    t.extractall(sys.argv[2], **kw)
print(json.dumps([m.name for m in members]))
"#;
    let mut c = Command::new("python3");
    c.args(["-c", script]).arg(&layer).arg(&py_root);
    let out = run(c, None);
    assert!(
        out.status.success(),
        "Python tarfile on the layer: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listed: Vec<String> = serde_json::from_slice(&out.stdout).unwrap();
    let py = names(listed);

    assert_eq!(gnu, py, "GNU tar and tarfile list different members");
    for want in [
        "usr/local/bin/cleave",
        "etc/passwd",
        "etc/ssl/certs/ca-certificates.crt",
    ] {
        assert!(
            gnu.iter().any(|n| n == want),
            "no {want} in the layer: {gnu:?}"
        );
    }
    // No absolute or `..` member names, no `.` entry restamping the container's root.
    for n in &gnu {
        assert!(
            !n.starts_with('/') && !n.split('/').any(|c| c == ".." || c == "."),
            "member name {n:?}"
        );
    }
    assert_eq!(
        std::fs::read(gnu_root.join("usr/local/bin/cleave")).unwrap(),
        std::fs::read(py_root.join("usr/local/bin/cleave")).unwrap(),
        "the two readers extracted different binaries"
    );

    // What GNU tar extracted runs on its own: loader and libraries from the layer.
    let out = chroot(&gnu_root, &["--version"]);
    assert!(out.status.success(), "{out:?}");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains(&crate_version()), "--version: {said}");
}

/// The Dockerfile assembles the same file tree: it runs this script's `rootfs` step and
/// copies the result onto `scratch`, with the same user and entrypoint.
#[test]
fn dockerfile_assembles_the_scripts_file_tree() {
    let df = std::fs::read_to_string(repo().join("Dockerfile")).unwrap();
    assert!(
        df.contains("scripts/build-image.sh rootfs /rootfs"),
        "the Dockerfile does not run scripts/build-image.sh rootfs"
    );
    assert!(df.contains("FROM scratch"));
    assert_eq!(
        df.matches("COPY --from=rootfs-").count(),
        2,
        "both final stages are the script's tree alone"
    );
    assert!(df.contains("USER 999:999"));
    assert!(df.contains(r#"ENTRYPOINT ["/usr/local/bin/cleave"]"#));
    assert!(
        !df.contains("distroless"),
        "a distroless base is another file tree"
    );
    let script = std::fs::read_to_string(repo().join("scripts/build-image.sh")).unwrap();
    for k in [
        "--config.user 999:999",
        "--config.entrypoint /usr/local/bin/cleave",
    ] {
        assert!(script.contains(k), "build-image.sh lacks {k}");
    }
    let ignore = std::fs::read_to_string(repo().join(".dockerignore")).unwrap();
    assert!(
        ignore.contains("!scripts/build-image.sh"),
        ".dockerignore keeps the script out of the build context"
    );
}
