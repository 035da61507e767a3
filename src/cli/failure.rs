//! How every subcommand reports a failure: `cleave: error[<Reason>]: <message>` on stderr,
//! or with `--json` one object `{"error": {"reason", "message", "path"}}` on stdout; exit
//! status 1. The reason is the library's (`crate::reason::Reason`, decided by type and
//! errno), the same word as in a CR condition and a metric label.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use cleave::reason::Reason;
use cleave::split::error::{format_path, format_reason};
use cleave::split::{PublishError, SplitError};
use cleave::sstable::FormatError;

#[derive(Debug)]
pub struct Failed {
    pub reason: Reason,
    pub message: String,
    pub path: PathBuf,
}

impl From<SplitError> for Failed {
    fn from(e: SplitError) -> Failed {
        Failed {
            reason: e.reason(),
            path: e.path().to_path_buf(),
            message: e.to_string(),
        }
    }
}

impl From<FormatError> for Failed {
    fn from(e: FormatError) -> Failed {
        Failed {
            reason: format_reason(&e),
            path: format_path(&e).to_path_buf(),
            message: e.to_string(),
        }
    }
}

impl Failed {
    /// Any other subcommand's error (`main`): the reason of the first typed error in its
    /// chain (split, publish, format, I/O); an error with no type is a message from
    /// argument handling, so `InvalidRequest`.
    pub fn of_anyhow(e: &anyhow::Error) -> Failed {
        let message = format!("{e:#}");
        for cause in e.chain() {
            let (reason, path) = if let Some(s) = cause.downcast_ref::<SplitError>() {
                (s.reason(), s.path().to_path_buf())
            } else if let Some(p) = cause.downcast_ref::<PublishError>() {
                (p.reason(), p.path().to_path_buf())
            } else if let Some(f) = cause.downcast_ref::<FormatError>() {
                (format_reason(f), format_path(f).to_path_buf())
            } else if let Some(io) = cause.downcast_ref::<std::io::Error>() {
                (Reason::of_io(io), PathBuf::new())
            } else {
                continue;
            };
            return Failed {
                reason,
                message,
                path,
            };
        }
        Failed {
            reason: Reason::InvalidRequest,
            message,
            path: PathBuf::new(),
        }
    }

    /// A request that cannot be carried out as given (an argument, a file it names).
    pub fn invalid(path: &Path, message: impl Into<String>) -> Failed {
        Failed {
            reason: Reason::InvalidRequest,
            message: message.into(),
            path: path.to_path_buf(),
        }
    }

    /// An I/O error on `path`: the reason from its errno (ENOSPC is `InsufficientSpace`).
    pub fn io(path: &Path, e: std::io::Error) -> Failed {
        Failed {
            reason: Reason::of_io(&e),
            message: format!("{}: {e}", path.display()),
            path: path.to_path_buf(),
        }
    }

    /// The `{"reason", "message", "path"}` object.
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "reason": self.reason.as_str(),
            "message": self.message,
            "path": self.path,
        })
    }

    pub fn print(&self, json: bool) -> ExitCode {
        if json {
            super::json::print_error(self.json());
        } else {
            eprintln!("cleave: error[{}]: {}", self.reason, self.message);
        }
        ExitCode::from(1)
    }
}

/// Runs a subcommand body and reports its failure as above.
pub fn report<T>(
    json: bool,
    body: impl FnOnce() -> Result<T, Failed>,
    ok: impl FnOnce(T) -> anyhow::Result<ExitCode>,
) -> anyhow::Result<ExitCode> {
    match body() {
        Ok(v) => ok(v),
        Err(f) => Ok(f.print(json)),
    }
}
