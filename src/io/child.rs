//! Measuring a child process from outside, as a benchmark must (the child may be `cp`):
//! wall time from spawn to exit, its `rusage` (CPU user and system, `ru_maxrss`) from
//! `wait4`, and its block-layer I/O from `/proc/<pid>/io`.
//!
//! `/proc/<pid>/io` disappears when the child is reaped, and before it exits it does not
//! yet count what the child's last writes cost. So the wait is in two steps:
//! `waitid(WEXITED | WNOWAIT)` waits for the exit but leaves the child a zombie whose
//! `/proc/<pid>/io` is still readable (waitid(2): "WNOWAIT Leave the child in a waitable
//! state; a later wait call can be used to again retrieve the child status information"),
//! then `wait4` reaps it and returns its rusage.

use std::io::{Error, ErrorKind, Read, Result};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::wait::{waitid, Id, WaitPidFlag};
use nix::unistd::Pid;

use super::proc::{parse_io, IoCounters};

/// What the kernel says about one finished child process.
#[derive(Debug, Clone)]
pub struct ChildMeasure {
    pub wall: Duration,
    /// `None` when the child was killed by a signal.
    pub exit_code: Option<i32>,
    pub user: Duration,
    pub system: Duration,
    /// `ru_maxrss` of the child (its `VmHWM`), bytes.
    pub peak_rss_bytes: u64,
    pub io: IoCounters,
    pub stdout: Vec<u8>,
    pub stderr: String,
}

/// Runs `cmd` to completion (stdin null, stdout and stderr captured) and measures it.
pub fn measure(cmd: &mut Command) -> Result<ChildMeasure> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let t0 = Instant::now();
    let mut child = cmd.spawn()?;
    let raw_pid = i32::try_from(child.id())
        .map_err(|_| Error::new(ErrorKind::InvalidData, "child pid out of range"))?;
    let pid = Pid::from_raw(raw_pid);
    let mut err_pipe = child
        .stderr
        .take()
        .ok_or_else(|| Error::other("no stderr pipe"))?;
    let err_thread = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err_pipe.read_to_string(&mut s);
        s
    });
    let mut stdout = Vec::new();
    if let Some(mut out) = child.stdout.take() {
        out.read_to_end(&mut stdout)?;
    }
    // Wait for the exit but leave the child a zombie: its /proc/<pid>/io is still there.
    loop {
        match waitid(Id::Pid(pid), WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT) {
            Ok(_) => break,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    let wall = t0.elapsed();
    let io_text = std::fs::read_to_string(format!("/proc/{raw_pid}/io"));
    let (status, ru) = wait4(raw_pid)?;
    // The child is reaped: std's handle must not wait for it again (dropping it does not).
    drop(child);
    let stderr = err_thread.join().unwrap_or_default();
    let io = parse_io(&io_text?)
        .ok_or_else(|| Error::new(ErrorKind::InvalidData, "unexpected /proc/<pid>/io"))?;
    let tv = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec.max(0) as u64) + Duration::from_micros(t.tv_usec.max(0) as u64)
    };
    Ok(ChildMeasure {
        wall,
        exit_code: libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status)),
        user: tv(ru.ru_utime),
        system: tv(ru.ru_stime),
        peak_rss_bytes: ru.ru_maxrss.max(0) as u64 * 1024,
        io,
        stdout,
        stderr,
    })
}

/// Reaps `pid` and returns its wait status and rusage. `nix` has no `wait4`.
fn wait4(pid: libc::pid_t) -> Result<(libc::c_int, libc::rusage)> {
    let mut status = 0;
    // SAFETY: rusage is plain old data, zero is a valid value; wait4 only writes it and
    // `status`, both live locals.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: as above; `pid` is our own child, still unreaped.
        let rc = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
        if rc == pid {
            return Ok((status, ru));
        }
        let e = Error::last_os_error();
        if e.kind() != ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measures_a_child() {
        let m = measure(Command::new("sh").args(["-c", "echo hi; echo err >&2"])).unwrap();
        assert_eq!(m.exit_code, Some(0));
        assert_eq!(m.stdout, b"hi\n");
        assert_eq!(m.stderr.trim(), "err");
        assert!(m.peak_rss_bytes > 0);
        let m = measure(&mut Command::new("false")).unwrap();
        assert_eq!(m.exit_code, Some(1));
    }
}
