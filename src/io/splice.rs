//! File bytes to a socket without a userspace copy: `sendfile(2)`.
//!
//! The stream sender carries a parent's Data.db chunk runs verbatim. Read into a buffer and
//! written to the socket, every byte is copied twice by the CPU (page cache → user, user →
//! socket buffer); `sendfile` hands the page-cache pages to the socket instead
//! (sendfile(2): "copying is done within the kernel"). It works on plaintext TCP only: a
//! TLS stream must encrypt in userspace (rustls), so TLS bodies keep the read path.
//!
//! The socket is blocking (a `std::net::TcpStream` on a blocking thread) with a send
//! timeout: `sendfile` then blocks until the whole step is queued or the timeout expires
//! (`EAGAIN`, reported as `TimedOut`). Steps of at most `STEP` bytes let the caller pay a
//! throttle, count progress and notice a cancel between them.

use std::fs::File;
use std::io::Write;
use std::os::fd::AsFd;

use nix::errno::Errno;

/// Bytes per `sendfile` call: large enough that the syscall count is negligible (1024 per
/// GiB), small enough for a smooth throttle and progress bar.
pub const STEP: usize = 1 << 20;

/// How a range went out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Path {
    /// `sendfile`: no userspace copy.
    ZeroCopy,
    /// The kernel refused `sendfile` for this file/socket pair (`EINVAL`/`ENOSYS`/
    /// `EOPNOTSUPP`, e.g. a filesystem without `splice_read`): `pread` + `write`.
    Copied,
}

/// Sends `len` bytes of `file` from `offset` to `sock`, in steps of at most [`STEP`].
/// `before_step(n)` runs before each step of `n` bytes (throttle, cancel: an `Err` stops
/// the transfer with that error); `after_step(n)` after it (progress). Returns how the
/// bytes went out. A file shorter than `offset + len` is `UnexpectedEof`.
pub fn send_file_range<S: AsFd + Write>(
    sock: &mut S,
    file: &File,
    offset: u64,
    len: u64,
    mut before_step: impl FnMut(u64) -> std::io::Result<()>,
    mut after_step: impl FnMut(u64),
) -> std::io::Result<Path> {
    let end = offset
        .checked_add(len)
        .ok_or_else(|| std::io::Error::other("range end overflows u64"))?;
    let mut at = offset;
    while at < end {
        let step = ((end - at) as usize).min(STEP);
        before_step(step as u64)?;
        let mut left = step;
        while left > 0 {
            let mut off = i64::try_from(at).map_err(|_| {
                std::io::Error::other(format!("offset {at} beyond what sendfile takes"))
            })?;
            match nix::sys::sendfile::sendfile64(sock.as_fd(), file, Some(&mut off), left) {
                Ok(0) => {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        format!("file ended at {at}, {} bytes before {end}", end - at),
                    ))
                }
                Ok(n) => {
                    at += n as u64;
                    left -= n;
                }
                Err(Errno::EINTR) => {}
                Err(Errno::EAGAIN) => {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        "socket send timed out (the peer stopped reading)",
                    ))
                }
                // Nothing was sent by this call: the rest goes through the copy path, from
                // exactly where sendfile stopped.
                Err(Errno::EINVAL | Errno::ENOSYS | Errno::EOPNOTSUPP) if left == step => {
                    copy_range(
                        sock,
                        file,
                        at,
                        end - at,
                        &mut before_step,
                        &mut after_step,
                        true,
                    )?;
                    return Ok(Path::Copied);
                }
                Err(e) => return Err(e.into()),
            }
        }
        after_step(step as u64);
    }
    Ok(Path::ZeroCopy)
}

/// The read-and-write path: `pread` into a buffer, `write_all` to the socket. `paid_first`
/// says the first step's `before_step` was already paid by the caller.
fn copy_range<S: Write>(
    sock: &mut S,
    file: &File,
    mut at: u64,
    len: u64,
    before_step: &mut impl FnMut(u64) -> std::io::Result<()>,
    after_step: &mut impl FnMut(u64),
    mut paid_first: bool,
) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    let end = at + len;
    let mut buf = vec![0u8; STEP.min(len as usize)];
    while at < end {
        let n = ((end - at) as usize).min(STEP);
        if !paid_first {
            before_step(n as u64)?;
        }
        paid_first = false;
        file.read_exact_at(&mut buf[..n], at)?;
        sock.write_all(&buf[..n])?;
        after_step(n as u64);
        at += n as u64;
    }
    Ok(())
}

/// Whether an error of a socket write means the peer is gone (it may have answered first:
/// read its response before calling the connection lost).
pub fn is_peer_gone(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::BrokenPipe
            | std::io::ErrorKind::ConnectionReset
            | std::io::ErrorKind::ConnectionAborted
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::net::{TcpListener, TcpStream};

    fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (b, _) = l.accept().unwrap();
        (a, b)
    }

    #[test]
    fn sends_exactly_the_range_zero_copy_in_steps() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        let data: Vec<u8> = (0..(3 * STEP + 12345))
            .map(|i| (i * 31 % 251) as u8)
            .collect();
        std::fs::write(&p, &data).unwrap();
        let f = File::open(&p).unwrap();
        let (mut a, mut b) = pair();
        let reader = std::thread::spawn(move || {
            let mut got = Vec::new();
            b.read_to_end(&mut got).unwrap();
            got
        });
        let (mut before, mut after) = (Vec::new(), 0u64);
        let how = send_file_range(
            &mut a,
            &f,
            777,
            (2 * STEP + 5) as u64,
            |n| {
                before.push(n);
                Ok(())
            },
            |n| after += n,
        )
        .unwrap();
        drop(a);
        assert_eq!(how, Path::ZeroCopy);
        assert_eq!(before, vec![STEP as u64, STEP as u64, 5]);
        assert_eq!(after, (2 * STEP + 5) as u64);
        assert_eq!(reader.join().unwrap(), &data[777..777 + 2 * STEP + 5]);
    }

    #[test]
    fn a_short_file_is_unexpected_eof_and_a_refused_step_stops() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, vec![7u8; 1000]).unwrap();
        let f = File::open(&p).unwrap();
        let (mut a, _b) = pair();
        let e = send_file_range(&mut a, &f, 500, 1000, |_| Ok(()), |_| {}).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::UnexpectedEof);
        let e = send_file_range(
            &mut a,
            &f,
            0,
            10,
            |_| Err(std::io::Error::other("cancelled")),
            |_| {},
        )
        .unwrap_err();
        assert_eq!(e.to_string(), "cancelled");
    }

    #[test]
    fn a_closed_peer_is_peer_gone() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, vec![7u8; 8 * STEP]).unwrap();
        let f = File::open(&p).unwrap();
        let (mut a, b) = pair();
        drop(b);
        let e = send_file_range(&mut a, &f, 0, (8 * STEP) as u64, |_| Ok(()), |_| {}).unwrap_err();
        assert!(is_peer_gone(&e), "{e:?}");
    }
}
