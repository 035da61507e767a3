//! The free-space pre-flight, shared by the operator's jobs and the CLI's `split`,
//! `rewrite`, `cleanup` and `apply-pending`: before the first byte is written, what the run
//! will write must fit in the filesystem's available space minus `--min-free-percent` of
//! its size. A split that fails with ENOSPC rolls back cleanly, but on a live node
//! Cassandra's commit log and flushes hit the same full disk in the meantime; the reserve
//! keeps room for them.

use std::path::{Path, PathBuf};

use super::plan::Layout;
use crate::io::fs::Space;
use crate::reason::Reason;
use crate::sstable::{Component, Descriptor};

/// `--min-free-percent`'s default, the operator's and the CLI's.
pub const DEFAULT_MIN_FREE_PERCENT: u8 = 10;

/// The pre-flight refused: the numbers it decided on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shortfall {
    /// The directory the run writes to.
    pub dir: PathBuf,
    /// The mount point of its filesystem, when `/proc/self/mountinfo` says.
    pub mount_point: Option<PathBuf>,
    /// What the run is predicted to write (`predicted_bytes`).
    pub predicted: u64,
    pub space: Space,
    pub min_free_percent: u8,
}

impl Shortfall {
    /// The bytes that must stay free: `min_free_percent` of the filesystem.
    pub fn reserve(&self) -> u64 {
        reserve(self.space.total, self.min_free_percent)
    }
}

impl std::fmt::Display for Shortfall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let fs = self
            .mount_point
            .as_ref()
            .map_or_else(String::new, |m| format!(" (filesystem {})", m.display()));
        let pct = if self.space.total == 0 {
            0.0
        } else {
            self.space.available as f64 * 100.0 / self.space.total as f64
        };
        write!(
            f,
            "{}{fs}: {} bytes free ({pct:.1}% of {}); this run writes about {} bytes (every rebuilt component, and Data.db unless the filesystem shares extents) and {} bytes ({}% of the filesystem) must stay free (--min-free-percent): nothing was written",
            self.dir.display(),
            self.space.available,
            self.space.total,
            self.predicted,
            self.reserve(),
            self.min_free_percent,
        )
    }
}

/// Why the pre-flight refused: too little space, or the filesystem could not be asked.
#[derive(Debug, thiserror::Error)]
pub enum SpaceError {
    #[error("{0}")]
    Short(Box<Shortfall>),
    #[error("statvfs {path}: {source}", path = .path.display())]
    Statvfs {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl SpaceError {
    pub fn reason(&self) -> Reason {
        match self {
            SpaceError::Short(_) => Reason::InsufficientSpace,
            SpaceError::Statvfs { source, .. } => Reason::of_io(source),
        }
    }
    pub fn path(&self) -> &Path {
        match self {
            SpaceError::Short(s) => &s.dir,
            SpaceError::Statvfs { path, .. } => path,
        }
    }
}

fn reserve(total: u64, min_free_percent: u8) -> u64 {
    total / 100 * u64::from(min_free_percent.min(100))
}

/// Bytes the children of `parent` need that are not shared with it: every rebuilt
/// component (Index, Summary, Filter, Statistics, … add up to about the parent's), plus its
/// Data.db unless `shares_data` (the output filesystem shares extents and the layout keeps
/// the parent's chunks), in which case only the re-encoded edge chunks are written (bounded
/// by 1 MiB per parent here). Conservative on purpose: the pre-flight refuses a run rather
/// than let it hit ENOSPC halfway.
pub fn predicted_bytes(parent: &Path, shares_data: bool) -> u64 {
    let Ok((desc, _)) = Descriptor::from_path(parent) else {
        return 0;
    };
    let dir = parent
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let mut total = 0u64;
    let Ok(rd) = std::fs::read_dir(dir) else {
        return 0;
    };
    for e in rd.filter_map(|e| e.ok()) {
        let Ok((d, c)) = Descriptor::from_path(&e.path()) else {
            continue;
        };
        if d != desc {
            continue;
        }
        let len = e.metadata().map(|m| m.len()).unwrap_or(0);
        total += match c {
            Component::Data if shares_data => len.min(1 << 20),
            _ => len,
        };
    }
    total
}

/// Whether `dir`'s filesystem shares extents (XFS, btrfs), asked without writing: what
/// `predicted_bytes` takes for `shares_data` when the layout keeps the parent's chunks.
pub fn shares_extents(dir: &Path) -> bool {
    matches!(
        crate::io::fs::guess_reflink(dir),
        crate::io::reflink::ReflinkSupport::Supported { .. }
    )
}

/// `predicted_bytes`'s `shares_data` for children written to `out` with `layout` (a
/// policy's; `None` is auto): `copy` and `regrid` write all of Data.db whatever the
/// filesystem.
pub fn shares_data(out: &Path, layout: Option<Layout>) -> bool {
    !matches!(layout, Some(Layout::Copy | Layout::Regrid)) && shares_extents(out)
}

/// The check itself: `predicted` must fit in the available space minus `min_free_percent`
/// of the filesystem. A filesystem already below the reserve refuses even a run that
/// predicts nothing (`apply-pending` writes only its transaction logs): any write then
/// eats into what Cassandra's commit log needs. Pure.
pub fn check_space(
    dir: &Path,
    predicted: u64,
    space: Space,
    min_free_percent: u8,
) -> Result<(), Box<Shortfall>> {
    let needed = predicted.saturating_add(reserve(space.total, min_free_percent));
    if needed > space.available {
        return Err(Box::new(Shortfall {
            dir: dir.to_path_buf(),
            mount_point: None,
            predicted,
            space,
            min_free_percent,
        }));
    }
    Ok(())
}

/// `check_space` on `dir`'s filesystem as it is now (`statvfs`); a refusal names the
/// filesystem's mount point.
pub fn preflight(dir: &Path, predicted: u64, min_free_percent: u8) -> Result<(), SpaceError> {
    let space = crate::io::fs::space(dir).map_err(|source| SpaceError::Statvfs {
        path: dir.to_path_buf(),
        source,
    })?;
    check_space(dir, predicted, space, min_free_percent).map_err(|mut s| {
        s.mount_point = crate::io::proc::mount_point(dir);
        SpaceError::Short(s)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    #[test]
    fn the_space_preflight_keeps_the_reserve_free() {
        let space = Space {
            available: 30 * GIB,
            total: 100 * GIB,
        };
        let d = Path::new("/data/ks/t");
        assert!(check_space(d, 19 * GIB, space, 10).is_ok());
        let e = SpaceError::Short(check_space(d, 21 * GIB, space, 10).unwrap_err());
        assert_eq!(e.reason(), Reason::InsufficientSpace);
        let m = e.to_string();
        assert!(
            m.contains("--min-free-percent")
                && m.contains("/data/ks/t")
                && m.contains(&format!("{} bytes free (30.0% of {})", 30 * GIB, 100 * GIB))
                && m.contains(&format!("writes about {} bytes", 21 * GIB))
                && m.contains(&format!("{} bytes (10% of the filesystem)", 10 * GIB)),
            "{m}"
        );
        assert!(check_space(d, 29 * GIB, space, 0).is_ok());
        assert!(check_space(d, 1, space, 100).is_err());
        // A reserve larger than what is free: nothing fits, not even a run writing nothing.
        assert!(check_space(d, 1, space, 80).is_err());
        assert!(check_space(d, 0, space, 31).is_err());
        assert!(check_space(d, 0, space, 30).is_ok());
    }
}
