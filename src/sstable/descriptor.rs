//! File names (`Descriptor`), versions and their feature flags, components and TOC.txt.
//!
//! A file name is `<version>-<id>-<format>-<Component>` (`io/sstable/Descriptor.java`),
//! e.g. `nb-1-big-Data.db` or `nb-3gkb_0yy8_0qglj2cfo1m18an04r-big-Statistics.db`.

use std::fmt;
use std::path::{Path, PathBuf};

use super::error::{FormatError, Result};

/// A BIG-format version string. The flags mirror `BigFormat.BigVersion` (Cassandra trunk,
/// the writer of the corpus's legacy fixtures); each names the Cassandra predicate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version([u8; 2]);

/// Versions cleave reads and writes: 3.0 (`ma`) through 5.0 (`oa`).
pub const SUPPORTED_BIG_VERSIONS: [&str; 9] =
    ["ma", "mb", "mc", "md", "me", "na", "nb", "nc", "oa"];

impl Version {
    pub fn parse(s: &str) -> Option<Version> {
        let b = s.as_bytes();
        if b.len() == 2 && b.iter().all(|c| c.is_ascii_lowercase()) {
            Some(Version([b[0], b[1]]))
        } else {
            None
        }
    }

    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.0).unwrap_or("??")
    }

    pub fn is_supported_big(&self) -> bool {
        SUPPORTED_BIG_VERSIONS.contains(&self.as_str())
    }

    /// BTI `da` (5.0's only BTI version) has `oa`'s flags: `BtiFormat.BtiVersion` answers
    /// every predicate below as `BigFormat.BigVersion` does for `oa` (bti-format.md §3:
    /// same Statistics.db serializer, `hasUIntDeletionTime`, `hasKeyRange`,
    /// `hasTokenSpaceCoverage`, messaging version 50; no legacy min/max). BIG never had a
    /// `d` version, so the name alone says which.
    fn flags(&self) -> [u8; 2] {
        if self.0 == *b"da" {
            *b"oa"
        } else {
            self.0
        }
    }

    /// `da`, the BTI version of Cassandra 5.0 (trunk's `ea`/`eb` and DataStax's are not).
    pub fn is_supported_bti(&self) -> bool {
        self.0 == *b"da"
    }

    fn at_least(&self, v: &str) -> bool {
        let f = self.flags();
        std::str::from_utf8(&f).unwrap_or("??") >= v
    }

    /// `hasCommitLogLowerBound` (mb+).
    pub fn has_commit_log_lower_bound(&self) -> bool {
        self.at_least("mb")
    }
    /// `hasCommitLogIntervals` (mc+).
    pub fn has_commit_log_intervals(&self) -> bool {
        self.at_least("mc")
    }
    /// `hasAccurateMinMax`: `m[d-z]|n[a-z]`; only says whether legacy min/max are trusted.
    pub fn has_accurate_min_max(&self) -> bool {
        matches!(self.flags(), [b'm', b'd'..=b'z'] | [b'n', _])
    }
    /// `hasLegacyMinMax`: `m[a-z]|n[a-z]`.
    pub fn has_legacy_min_max(&self) -> bool {
        matches!(self.flags(), [b'm', _] | [b'n', _])
    }
    /// `hasOriginatingHostId`: `nb+` or `m[e-z]` (`na` lacks it).
    pub fn has_originating_host_id(&self) -> bool {
        self.at_least("nb") || matches!(self.flags(), [b'm', b'e'..=b'z'])
    }
    /// `hasMaxCompressedLength` (na+): CompressionInfo carries it and chunks may be stored raw.
    pub fn has_max_compressed_length(&self) -> bool {
        self.at_least("na")
    }
    /// `hasPendingRepair` / `hasIsTransient` (na+).
    pub fn has_pending_repair(&self) -> bool {
        self.at_least("na")
    }
    /// `hasMetadataChecksum` (na+): Statistics.db carries CRC32s.
    pub fn has_metadata_checksum(&self) -> bool {
        self.at_least("na")
    }
    /// `hasOldBfFormat` (< na): Filter.db words are byte-reversed.
    pub fn has_old_bf_format(&self) -> bool {
        !self.at_least("na")
    }
    /// `hasImprovedMinMax` (nc+): typed min/max clustering Slice in STATS.
    pub fn has_improved_min_max(&self) -> bool {
        self.at_least("nc")
    }
    /// `hasPartitionLevelDeletionPresenceMarker` (nc+).
    pub fn has_partition_level_deletions_marker(&self) -> bool {
        self.at_least("nc")
    }
    /// `hasKeyRange` (nc+): first/last key in STATS.
    pub fn has_key_range(&self) -> bool {
        self.at_least("nc")
    }
    /// `hasUintDeletionTime` (oa+): deletion times unsigned, new DeletionTime encoding.
    pub fn has_uint_deletion_time(&self) -> bool {
        self.at_least("oa")
    }
    /// `hasTokenSpaceCoverage` (oa+).
    pub fn has_token_space_coverage(&self) -> bool {
        self.at_least("oa")
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    Big,
    Bti,
}

impl Format {
    pub fn as_str(&self) -> &'static str {
        match self {
            Format::Big => "big",
            Format::Bti => "bti",
        }
    }
}

/// Generation id: a decimal sequence number, or (4.1+) a 28-character base-36 rendering
/// of a time-based UUID (`UUIDBasedSSTableId`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SSTableId {
    Sequence(u32),
    Uuid(String),
}

impl SSTableId {
    pub fn parse(s: &str) -> Option<SSTableId> {
        // `UUIDBasedSSTableId`: `dddd_ssss_nnnnnrrrrrrrrrrrrr`, base-36, zero padded.
        let b = s.as_bytes();
        if b.len() == 28
            && b[4] == b'_'
            && b[9] == b'_'
            && b.iter()
                .enumerate()
                .all(|(i, c)| i == 4 || i == 9 || c.is_ascii_digit() || c.is_ascii_lowercase())
        {
            return Some(SSTableId::Uuid(s.to_string()));
        }
        // `SequenceBasedSSTableId`: a non-negative int.
        if !s.is_empty() && s.len() <= 10 && b.iter().all(|c| c.is_ascii_digit()) {
            return s
                .parse::<i32>()
                .ok()
                .and_then(|v| u32::try_from(v).ok())
                .map(SSTableId::Sequence);
        }
        None
    }
}

impl fmt::Display for SSTableId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SSTableId::Sequence(n) => write!(f, "{n}"),
            SSTableId::Uuid(s) => f.write_str(s),
        }
    }
}

/// The components cleave knows by name; anything else is `Other` (Cassandra's CUSTOM).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Component {
    Data,
    Index,
    Summary,
    Filter,
    Statistics,
    CompressionInfo,
    Crc,
    Digest,
    Toc,
    Partitions,
    Rows,
    Other(String),
}

impl Component {
    pub fn parse(name: &str) -> Component {
        match name {
            "Data.db" => Component::Data,
            "Index.db" => Component::Index,
            "Summary.db" => Component::Summary,
            "Filter.db" => Component::Filter,
            "Statistics.db" => Component::Statistics,
            "CompressionInfo.db" => Component::CompressionInfo,
            "CRC.db" => Component::Crc,
            "Digest.crc32" => Component::Digest,
            "TOC.txt" => Component::Toc,
            "Partitions.db" => Component::Partitions,
            "Rows.db" => Component::Rows,
            other => Component::Other(other.to_string()),
        }
    }

    pub fn file_name(&self) -> &str {
        match self {
            Component::Data => "Data.db",
            Component::Index => "Index.db",
            Component::Summary => "Summary.db",
            Component::Filter => "Filter.db",
            Component::Statistics => "Statistics.db",
            Component::CompressionInfo => "CompressionInfo.db",
            Component::Crc => "CRC.db",
            Component::Digest => "Digest.crc32",
            Component::Toc => "TOC.txt",
            Component::Partitions => "Partitions.db",
            Component::Rows => "Rows.db",
            Component::Other(s) => s,
        }
    }

    /// Secondary-index components (SASI `SI_*`, SAI `SAI+*`) index positions of this
    /// sstable; a split cannot carry them over.
    pub fn is_secondary_index(&self) -> bool {
        match self {
            Component::Other(s) => s.starts_with("SI_") || s.starts_with("SAI"),
            _ => false,
        }
    }
}

/// One sstable's identity: directory, version, generation id and format.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Descriptor {
    pub dir: PathBuf,
    pub version: Version,
    pub id: SSTableId,
    pub format: Format,
}

impl Descriptor {
    /// Parses any component's path. Mirrors `Descriptor.fromFileWithComponent`: exactly four
    /// `-`-separated tokens.
    pub fn from_path(path: &Path) -> Result<(Descriptor, Component)> {
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(|| FormatError::corrupt(path, None, "file name is not valid UTF-8"))?;
        let parts: Vec<&str> = name.split('-').collect();
        if parts.len() != 4 {
            return Err(FormatError::corrupt(
                path,
                None,
                format!(
                    "file name {name:?}: expected <version>-<id>-<format>-<Component> (4 parts separated by '-'), found {}",
                    parts.len()
                ),
            ));
        }
        let version = Version::parse(parts[0]).ok_or_else(|| {
            FormatError::corrupt(
                path,
                None,
                format!(
                    "file name {name:?}: {:?} is not a version (two lowercase letters)",
                    parts[0]
                ),
            )
        })?;
        let id = SSTableId::parse(parts[1]).ok_or_else(|| {
            FormatError::corrupt(
                path,
                None,
                format!("file name {name:?}: {:?} is not a generation id (a decimal int or a 28-char UUID id)", parts[1]),
            )
        })?;
        let format = match parts[2] {
            "big" => Format::Big,
            "bti" => Format::Bti,
            f => {
                return Err(FormatError::unsupported(
                    path,
                    None,
                    format!("sstable format {f:?} (cleave knows big and bti)"),
                ))
            }
        };
        let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
        Ok((
            Descriptor {
                dir,
                version,
                id,
                format,
            },
            Component::parse(parts[3]),
        ))
    }

    pub fn file_name(&self, c: &Component) -> String {
        format!(
            "{}-{}-{}-{}",
            self.version,
            self.id,
            self.format.as_str(),
            c.file_name()
        )
    }

    pub fn path(&self, c: &Component) -> PathBuf {
        self.dir.join(self.file_name(c))
    }

    /// Fails with a clear error unless this is a BIG version or the BTI `da` cleave handles.
    pub fn require_supported(&self) -> Result<()> {
        let data = self.path(&Component::Data);
        if self.format == Format::Bti {
            if self.version.is_supported_bti() {
                return Ok(());
            }
            return Err(FormatError::unsupported(
                &data,
                None,
                format!(
                    "BTI version {:?}: cleave supports da (Cassandra 5.0); later trie versions (ea, eb) and DataStax's are not read",
                    self.version.as_str()
                ),
            ));
        }
        if !self.version.is_supported_big() {
            return Err(FormatError::unsupported(
                &data,
                None,
                format!(
                    "BIG version {:?}: cleave supports {} (Cassandra 3.0 to 5.0)",
                    self.version.as_str(),
                    SUPPORTED_BIG_VERSIONS.join(", ")
                ),
            ));
        }
        Ok(())
    }
}

/// TOC.txt: one component file name per line, written by `PrintWriter.println` in `Set`
/// iteration order (`TOCComponent`). Order is kept so that a re-serialised TOC is the same
/// bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Toc {
    pub components: Vec<Component>,
}

impl Toc {
    pub fn parse(file: &Path, bytes: &[u8]) -> Result<Toc> {
        let text = std::str::from_utf8(bytes).map_err(|e| {
            FormatError::corrupt(
                file,
                Some(e.valid_up_to() as u64),
                "TOC.txt is not UTF-8 text",
            )
        })?;
        let mut components = Vec::new();
        let mut offset = 0u64;
        for line in text.split_inclusive('\n') {
            let name = line.trim_end_matches('\n');
            if name.is_empty() || name.contains(['\r', '/', '\0']) {
                return Err(FormatError::corrupt(
                    file,
                    Some(offset),
                    format!("expected a component file name per line, found {name:?}"),
                ));
            }
            components.push(Component::parse(name));
            offset += line.len() as u64;
        }
        if !text.is_empty() && !text.ends_with('\n') {
            return Err(FormatError::corrupt(
                file,
                Some(offset),
                "last line of TOC.txt is not terminated by a newline",
            ));
        }
        Ok(Toc { components })
    }

    pub fn serialize(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for c in &self.components {
            out.extend_from_slice(c.file_name().as_bytes());
            out.push(b'\n');
        }
        out
    }

    pub fn contains(&self, c: &Component) -> bool {
        self.components.contains(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_sequence_and_uuid_names() {
        let (d, c) = Descriptor::from_path(Path::new("/x/nb-1-big-Data.db")).unwrap();
        assert_eq!(d.version.as_str(), "nb");
        assert_eq!(d.id, SSTableId::Sequence(1));
        assert_eq!(c, Component::Data);
        assert_eq!(d.path(&Component::Index), Path::new("/x/nb-1-big-Index.db"));
        let (d, c) = Descriptor::from_path(Path::new(
            "nb-3gkb_0yy8_0qglj2cfo1m18an04r-big-Statistics.db",
        ))
        .unwrap();
        assert_eq!(d.id, SSTableId::Uuid("3gkb_0yy8_0qglj2cfo1m18an04r".into()));
        assert_eq!(c, Component::Statistics);
    }

    #[test]
    fn rejects_bad_names() {
        assert!(Descriptor::from_path(Path::new("ks-cf-nb-1-big-Data.db")).is_err());
        assert!(Descriptor::from_path(Path::new("NB-1-big-Data.db")).is_err());
        assert!(Descriptor::from_path(Path::new("nb-x1-big-Data.db")).is_err());
        assert!(Descriptor::from_path(Path::new("nb-1-huge-Data.db")).is_err());
        let (d, _) = Descriptor::from_path(Path::new("zz-1-big-Data.db")).unwrap();
        assert!(d.require_supported().is_err());
    }

    #[test]
    fn feature_flags() {
        let v = |s| Version::parse(s).unwrap();
        assert!(!v("ma").has_commit_log_lower_bound());
        assert!(v("mb").has_commit_log_lower_bound());
        assert!(v("me").has_originating_host_id());
        assert!(!v("na").has_originating_host_id());
        assert!(v("nb").has_originating_host_id());
        assert!(v("me").has_old_bf_format());
        assert!(!v("na").has_old_bf_format());
        assert!(v("nc").has_legacy_min_max() && v("nc").has_improved_min_max());
        assert!(!v("oa").has_legacy_min_max() && v("oa").has_uint_deletion_time());
    }

    #[test]
    fn toc_round_trip() {
        let bytes = b"Data.db\nIndex.db\nTOC.txt\n";
        let t = Toc::parse(Path::new("t"), bytes).unwrap();
        assert_eq!(t.serialize(), bytes);
        assert!(Toc::parse(Path::new("t"), b"Data.db").is_err());
        assert!(Toc::parse(Path::new("t"), b"Data.db\n\n").is_err());
    }
}
