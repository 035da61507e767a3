//! The node's Cassandra release, and which source decided it (issue 32, deliverable 4).
//!
//! The release decides the default target of the node's jobs and the receiver's
//! strictness: from 5.0.5 compaction reads Data.db from position 0 (`SSTableSimpleScanner`,
//! CASSANDRA-20092), so a child with a dead prefix must never reach such a node. Sources, in
//! order: `--cassandra-version` when given (the operator's word), the management API's
//! `/api/v0/metadata/versions/release` when one is configured and answers, the node's own
//! `system.local` sstables in the data directory (`release_version`, newest cell; read
//! with `sstable::release`, so it works with Cassandra stopped and without an agent), else
//! unknown — the strictest, the newest line's rules. Resolved once at the sidecar's start: an upgrade
//! of Cassandra restarts its pod, and with it the sidecar.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::mgmt::Client;
use crate::sstable::cassandra::TargetCassandra;

/// Where the node's release came from: the `source` label of `cleave_cassandra_release_info`
/// and the startup log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReleaseSource {
    /// `--cassandra-version` (chart `config.cassandraVersion`).
    Flag,
    /// `GET /api/v0/metadata/versions/release`.
    ManagementApi,
    /// `release_version` in the data directory's `system/local-*` sstables.
    SystemLocal,
    /// Nothing said: unknown, treated as the newest line.
    None,
}

impl ReleaseSource {
    pub fn as_str(self) -> &'static str {
        match self {
            ReleaseSource::Flag => "flag",
            ReleaseSource::ManagementApi => "management-api",
            ReleaseSource::SystemLocal => "system-local",
            ReleaseSource::None => "none",
        }
    }
}

/// The node's release, its source, and why a source that was asked did not decide (a
/// management API that did not answer, an answer that is not a release).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeRelease {
    pub release: TargetCassandra,
    pub source: ReleaseSource,
    pub note: Option<String>,
}

/// How long the management API is given at start: the sidecar must not hold its pod.
pub const ASK_TIMEOUT: Duration = Duration::from_secs(10);

/// Resolves the node's release: `flag` if known, else the management API's answer, else
/// `data_dir`'s `system.local`.
pub async fn resolve(flag: TargetCassandra, api: Option<&Client>, data_dir: &Path) -> NodeRelease {
    if flag != TargetCassandra::Unknown {
        return NodeRelease {
            release: flag,
            source: ReleaseSource::Flag,
            note: None,
        };
    }
    let mut note = None;
    if let Some(api) = api {
        match tokio::time::timeout(ASK_TIMEOUT, api.release_version()).await {
            Ok(Ok(text)) => match TargetCassandra::parse(&text) {
                Ok(release) if release != TargetCassandra::Unknown => {
                    return NodeRelease {
                        release,
                        source: ReleaseSource::ManagementApi,
                        note: None,
                    };
                }
                _ => {
                    note = Some(format!(
                        "the management API's release {:?} is not a release",
                        text.chars().take(64).collect::<String>()
                    ))
                }
            },
            Ok(Err(e)) => note = Some(e.to_string()),
            Err(_) => {
                note = Some(format!(
                "the management API did not answer /api/v0/metadata/versions/release within {} s",
                ASK_TIMEOUT.as_secs()
            ))
            }
        }
    }
    let dir = data_dir.to_path_buf();
    let why = match tokio::task::spawn_blocking(move || from_system_local(&dir)).await {
        Ok(Ok((release, sstable))) => {
            return NodeRelease {
                release,
                source: ReleaseSource::SystemLocal,
                note: note.map(|n| format!("{n}; read from {}", sstable.display())),
            };
        }
        Ok(Err(why)) => why,
        Err(e) => e.to_string(),
    };
    NodeRelease {
        release: TargetCassandra::Unknown,
        source: ReleaseSource::None,
        note: Some(match note {
            Some(n) => format!("{n}; {why}"),
            None => why,
        }),
    }
}

/// The release in `data_dir`'s own `system.local` sstables (`release_version`, newest cell)
/// and the Data.db it was read from, or why none decides. Blocking: reads files. The CLI asks
/// it directly (a node's data directory is the table directory's grandparent).
pub fn from_system_local(data_dir: &Path) -> Result<(TargetCassandra, PathBuf), String> {
    let scan = crate::sstable::release::node_release(data_dir).map_err(|e| e.to_string())?;
    match scan.release {
        Some(r) => match TargetCassandra::parse(&r.version) {
            Ok(release) if release != TargetCassandra::Unknown => Ok((release, r.sstable)),
            _ => Err(format!(
                "system.local's release_version {:?} is not a release",
                r.version
            )),
        },
        None => Err(format!(
            "no release_version in {} system.local sstable(s) under {}{}",
            scan.sstables_read,
            data_dir.display(),
            if scan.skipped.is_empty() {
                String::new()
            } else {
                format!(" ({} skipped: {})", scan.skipped.len(), scan.skipped[0].1)
            }
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A management API that answers every request with `body` (200, text/plain).
    async fn agent(body: &'static str) -> Client {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf).await;
                let a = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = s.write_all(a.as_bytes()).await;
            }
        });
        Client::new(crate::mgmt::Endpoint::parse(&format!("http://{addr}"), None).unwrap())
    }

    #[tokio::test]
    async fn release_from_the_management_api_unless_the_flag_says_otherwise() {
        let api = agent("5.0.9").await;
        let r = resolve(
            TargetCassandra::Unknown,
            Some(&api),
            Path::new("/nonexistent"),
        )
        .await;
        assert_eq!(r.release, TargetCassandra::parse("5.0.9").unwrap());
        assert_eq!(r.source, ReleaseSource::ManagementApi);
        let flag = TargetCassandra::parse("4.1").unwrap();
        assert_eq!(
            resolve(flag, Some(&api), Path::new("/nonexistent"))
                .await
                .source,
            ReleaseSource::Flag
        );
        // An answer that is not a release decides nothing, and says why.
        let r = resolve(
            TargetCassandra::Unknown,
            Some(&agent("banana").await),
            Path::new("/nonexistent"),
        )
        .await;
        assert_eq!(
            (r.release, r.source),
            (TargetCassandra::Unknown, ReleaseSource::None)
        );
        assert!(r.note.unwrap_or_default().contains("banana"));
        // Nobody listening: unknown, with the management API's error.
        let closed = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap()
        };
        let api =
            Client::new(crate::mgmt::Endpoint::parse(&format!("http://{closed}"), None).unwrap());
        let r = resolve(
            TargetCassandra::Unknown,
            Some(&api),
            Path::new("/nonexistent"),
        )
        .await;
        assert_eq!(r.source, ReleaseSource::None);
        assert!(r.note.is_some());
    }

    #[tokio::test]
    async fn release_flag_decides_and_nothing_else_is_unknown() {
        let v = TargetCassandra::parse("4.1.7").unwrap();
        let r = resolve(v, None, Path::new("/nonexistent")).await;
        assert_eq!((r.release, r.source), (v, ReleaseSource::Flag));
        let r = resolve(TargetCassandra::Unknown, None, Path::new("/nonexistent")).await;
        assert_eq!(
            (r.release, r.source),
            (TargetCassandra::Unknown, ReleaseSource::None)
        );
        assert!(r.note.unwrap_or_default().contains("/nonexistent"));
        // The node's own system.local (a real 4.1.10 flush), below the management API.
        let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/system_local/4.1.10");
        let r = resolve(TargetCassandra::Unknown, None, &fixture).await;
        assert_eq!(r.release, TargetCassandra::parse("4.1.10").unwrap());
        assert_eq!(r.source, ReleaseSource::SystemLocal);
        let api = agent("5.0.9").await;
        let r = resolve(TargetCassandra::Unknown, Some(&api), &fixture).await;
        assert_eq!(r.source, ReleaseSource::ManagementApi);
        // A node that writes BTI: its da system.local is read the same way.
        let bti = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/system_local/5.0.9-bti");
        let r = resolve(TargetCassandra::Unknown, None, &bti).await;
        assert_eq!(r.release, TargetCassandra::parse("5.0.9").unwrap());
        assert_eq!(r.source, ReleaseSource::SystemLocal);
    }
}
