//! Named fault points for crash tests: `CLEAVE_CRASH_AT=<point>[@N]` kills the process with
//! SIGKILL the N-th time (default: the first) execution reaches `fault::point("<point>")`.
//!
//! SIGKILL rather than `abort()` or a panic: no destructor runs, no buffer is flushed, no
//! staging guard cleans up — what the kernel has is what a power cut on a filesystem that
//! honours fsync would leave, minus the unsynced pages. `CLEAVE_CRASH_LIST=<file>` appends
//! every point reached (one name a line), so a campaign can enumerate the points of a run
//! and then kill at each.
//!
//! Point names are stable and documented in docs/reliability.md; a point is
//! `<where>:<what>`, e.g. `publish:logged`, `write:child-file`, `fsync:before`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

struct Target {
    point: String,
    nth: u64,
}

fn target() -> &'static Option<Target> {
    static T: OnceLock<Option<Target>> = OnceLock::new();
    T.get_or_init(|| {
        let spec = std::env::var("CLEAVE_CRASH_AT").ok()?;
        let (point, nth) = match spec.rsplit_once('@') {
            Some((p, n)) => (p.to_string(), n.parse().unwrap_or(1)),
            None => (spec, 1),
        };
        Some(Target { point, nth })
    })
}

static HITS: AtomicU64 = AtomicU64::new(0);

/// Marks a place where a crash must be survivable. Free when no fault is armed.
pub fn point(name: &str) {
    if let Ok(list) = std::env::var("CLEAVE_CRASH_LIST") {
        use std::io::Write;
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(list)
        {
            // One write(2) per line: `writeln!` issues the name and the newline as two writes,
            // and points reached on two threads at once then interleave into a merged name
            // and an empty line (seen in CI: a campaign armed `CLEAVE_CRASH_AT=@1`). O_APPEND
            // makes each single write land whole.
            let _ = f.write_all(format!("{name}\n").as_bytes());
        }
    }
    let Some(t) = target() else { return };
    if t.point != name {
        return;
    }
    if HITS.fetch_add(1, Ordering::SeqCst) + 1 == t.nth {
        eprintln!("cleave: CLEAVE_CRASH_AT={name}@{}: SIGKILL", t.nth);
        // SAFETY: kill(2) on our own pid with a constant signal has no memory effects.
        unsafe {
            libc::kill(libc::getpid(), libc::SIGKILL);
        }
    }
}

/// Error injection beside crash injection: `CLEAVE_FAIL_AT=<point>[@N]` makes the N-th call
/// of `io_point(<point>)` fail with EIO (`CLEAVE_FAIL_ERRNO=<errno>` for another, e.g. 28
/// for ENOSPC), as if the syscall after it had failed. Tests use it to fail every step of a
/// publication and check that what is left is still exactly the parent or all children.
fn fail_target() -> &'static Option<Target> {
    static T: OnceLock<Option<Target>> = OnceLock::new();
    T.get_or_init(|| {
        let spec = std::env::var("CLEAVE_FAIL_AT").ok()?;
        let (point, nth) = match spec.rsplit_once('@') {
            Some((p, n)) => (p.to_string(), n.parse().unwrap_or(1)),
            None => (spec, 1),
        };
        Some(Target { point, nth })
    })
}

static FAIL_HITS: AtomicU64 = AtomicU64::new(0);

/// A crash point (`point`) that can also be made to fail (`CLEAVE_FAIL_AT`).
pub fn io_point(name: &str) -> std::io::Result<()> {
    point(name);
    let Some(t) = fail_target() else {
        return Ok(());
    };
    if t.point == name && FAIL_HITS.fetch_add(1, Ordering::SeqCst) + 1 == t.nth {
        let errno = std::env::var("CLEAVE_FAIL_ERRNO")
            .ok()
            .and_then(|e| e.parse().ok())
            .unwrap_or(libc::EIO);
        eprintln!(
            "cleave: CLEAVE_FAIL_AT={name}@{}: injected errno {errno}",
            t.nth
        );
        return Err(std::io::Error::from_raw_os_error(errno));
    }
    Ok(())
}
