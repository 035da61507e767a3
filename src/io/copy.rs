//! Copying byte ranges between files: `copy_file_range` (in-kernel, may itself share
//! extents on some filesystems), falling back to a buffered copy where the kernel refuses.

use std::fs::File;
use std::os::unix::fs::FileExt;

use nix::errno::Errno;

/// Copies `len` bytes of `src` at `src_offset` to `dst` at `dst_offset`.
pub fn copy_range(
    src: &File,
    mut src_offset: u64,
    mut len: u64,
    dst: &File,
    mut dst_offset: u64,
) -> std::io::Result<()> {
    while len > 0 {
        let mut so = src_offset as i64;
        let mut d = dst_offset as i64;
        let n = match nix::fcntl::copy_file_range(
            src,
            Some(&mut so),
            dst,
            Some(&mut d),
            len.min(1 << 30) as usize,
        ) {
            Ok(n) => n,
            Err(Errno::EXDEV | Errno::ENOSYS | Errno::EOPNOTSUPP | Errno::EINVAL) => {
                return buffered_copy(src, src_offset, len, dst, dst_offset);
            }
            Err(Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
        };
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!("source ended at {src_offset} with {len} bytes still to copy"),
            ));
        }
        src_offset += n as u64;
        dst_offset += n as u64;
        len -= n as u64;
    }
    Ok(())
}

fn buffered_copy(
    src: &File,
    mut src_offset: u64,
    mut len: u64,
    dst: &File,
    mut dst_offset: u64,
) -> std::io::Result<()> {
    let mut buf = vec![0u8; (1 << 20).min(len as usize)];
    while len > 0 {
        let n = buf.len().min(len as usize);
        src.read_exact_at(&mut buf[..n], src_offset)?;
        dst.write_all_at(&buf[..n], dst_offset)?;
        src_offset += n as u64;
        dst_offset += n as u64;
        len -= n as u64;
    }
    Ok(())
}
