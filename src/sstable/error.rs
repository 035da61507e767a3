//! One error type for everything the format layer reads.
//!
//! Every error names the file (or component) it came from, the byte offset where the
//! problem was seen, and what was expected there, so that an operator can open the file
//! in a hex editor and see the same thing.

use std::fmt;
use std::path::{Path, PathBuf};

/// Where in which file a problem was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    pub file: PathBuf,
    pub offset: Option<u64>,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.offset {
            Some(o) => write!(f, "{} at offset {}", self.file.display(), o),
            None => write!(f, "{}", self.file.display()),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    /// The bytes do not follow the format: `what` says what was expected.
    #[error("{loc}: {what}")]
    Corrupt { loc: Location, what: String },
    /// The file ends before a field that must be there.
    #[error("{loc}: truncated: needed {needed} more byte(s) for {field}, file has {available}")]
    Truncated {
        loc: Location,
        field: &'static str,
        needed: u64,
        available: u64,
    },
    /// A well-formed file that uses something cleave does not handle (a version, a
    /// partitioner, a compressor).
    #[error("{loc}: unsupported: {what}")]
    Unsupported { loc: Location, what: String },
    /// A checksum stored in the file does not match the bytes it covers.
    #[error(
        "{loc}: checksum mismatch in {what}: stored {stored:#010x}, computed {computed:#010x}"
    )]
    Checksum {
        loc: Location,
        what: String,
        stored: u32,
        computed: u32,
    },
    #[error("{file}: {source}")]
    Io {
        file: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

pub type Result<T, E = FormatError> = std::result::Result<T, E>;

impl FormatError {
    pub fn corrupt(file: &Path, offset: Option<u64>, what: impl Into<String>) -> Self {
        FormatError::Corrupt {
            loc: Location {
                file: file.to_path_buf(),
                offset,
            },
            what: what.into(),
        }
    }

    pub fn unsupported(file: &Path, offset: Option<u64>, what: impl Into<String>) -> Self {
        FormatError::Unsupported {
            loc: Location {
                file: file.to_path_buf(),
                offset,
            },
            what: what.into(),
        }
    }

    pub fn io(file: &Path, source: std::io::Error) -> Self {
        FormatError::Io {
            file: file.to_path_buf(),
            source,
        }
    }

    /// A short label for metrics and tests ("corrupt", "truncated", …).
    pub fn kind(&self) -> &'static str {
        match self {
            FormatError::Corrupt { .. } => "corrupt",
            FormatError::Truncated { .. } => "truncated",
            FormatError::Unsupported { .. } => "unsupported",
            FormatError::Checksum { .. } => "checksum",
            FormatError::Io { .. } => "io",
        }
    }
}
