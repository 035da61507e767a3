//! The manifest of one child sstable on the wire: what the receiver must know before it
//! accepts a byte — who the child is (transfer id, keyspace, table, version), which
//! components follow in which order, and each one's size and whole-file CRC32.
//!
//! Envelope (big-endian): `"CLVM"` magic, u16 protocol version, u32 payload length, the
//! payload (UTF-8 JSON, unknown fields refused), u32 CRC32 of everything before it. The
//! envelope makes a truncated or bit-flipped manifest fail with a named field instead of
//! parsing as something else; the JSON keeps it readable in logs and docs/stream.md.
//!
//! `decode` is the only way the receiver gets a `Manifest`, and it validates every field
//! (names, sizes, order) so that nothing downstream has to. Pure: bytes in, values out.

use serde::{Deserialize, Serialize};

use crate::sstable::Format;

pub const MAGIC: &[u8; 4] = b"CLVM";
/// The protocol version this build speaks (docs/stream.md).
pub const PROTOCOL_VERSION: u16 = 1;
/// Largest encoded manifest a receiver reads (the JSON of 7 files is ~1 KiB).
pub const MAX_MANIFEST_BYTES: usize = 64 * 1024;
/// Cassandra's `SchemaConstants.NAME_LENGTH`: keyspace and table names are at most 48
/// characters of `[A-Za-z0-9_]`.
pub const MAX_NAME_LENGTH: usize = 48;
/// Transfer ids and group names become directory names on the receiver.
pub const MAX_ID_LENGTH: usize = 160;
/// Bounds on declared sizes. Data.db: 16 TiB. CompressionInfo.db and CRC.db are parsed in
/// memory by the receiver to check chunks as they arrive: 256 MiB (32 M chunks). Any other
/// component: 64 GiB (Index.db of a multi-TiB sstable).
pub const MAX_DATA_BYTES: u64 = 16 << 40;
pub const MAX_CHUNK_TABLE_BYTES: u64 = 256 << 20;
pub const MAX_COMPONENT_BYTES: u64 = 64 << 30;

/// The components a sender may ship. Digest.crc32 and TOC.txt are written by the receiver
/// (it computes the digest itself, and lists what it actually received).
pub const ALLOWED_COMPONENTS: &[&str] = &[
    "CompressionInfo.db",
    "CRC.db",
    "Statistics.db",
    "Summary.db",
    "Filter.db",
    "Index.db",
    "Partitions.db",
    "Rows.db",
    "Data.db",
];

/// The child's sstable format. A manifest without `format` is BIG (what every receiver
/// before BTI support understood); a receiver that predates the field refuses a BTI
/// manifest (`deny_unknown_fields`) instead of writing BTI files under BIG names.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ManifestFormat {
    #[default]
    Big,
    Bti,
}

impl ManifestFormat {
    pub fn of(f: Format) -> ManifestFormat {
        match f {
            Format::Big => ManifestFormat::Big,
            Format::Bti => ManifestFormat::Bti,
        }
    }
    pub fn format(self) -> Format {
        match self {
            ManifestFormat::Big => Format::Big,
            ManifestFormat::Bti => Format::Bti,
        }
    }
    fn is_big(&self) -> bool {
        *self == ManifestFormat::Big
    }
    /// The primary index components a child of this format must carry, and the ones it
    /// must not.
    fn index_components(self) -> (&'static [&'static str], &'static [&'static str]) {
        match self {
            ManifestFormat::Big => (&["Index.db"], &["Partitions.db", "Rows.db"]),
            ManifestFormat::Bti => (&["Partitions.db", "Rows.db"], &["Index.db", "Summary.db"]),
        }
    }
}

/// What the receiver does with the child once it passed every check (RangeStream
/// `spec.import`).
/// One type from the CRD (`RangeStream.spec.import`) through the manifest to the receiver.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
pub enum Import {
    /// Leave it in the receiver's `ready/<keyspace>/<table>/` directory.
    #[default]
    None,
    /// Move it into `<table dir>/cleave-staged/<group>/<ks>/<table>/` for an operator's `nodetool import --keep-repaired`.
    Staging,
    /// As `Staging`, then run the receiver's configured import command on that directory.
    Import,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileEntry {
    /// Component file name, one of `ALLOWED_COMPONENTS`.
    pub component: String,
    pub size: u64,
    /// CRC32 (IEEE, as `Digest.crc32`) of the whole file.
    pub crc32: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// Idempotency key: `<RangeStream uid>.<parent generation>.<child index>` (or any
    /// `[A-Za-z0-9_.-]` string from the CLI). A replay of a published id publishes nothing.
    pub transfer: String,
    /// Groups children on the receiver (the RangeStream's name): `cleave-staged/<group>/<ks>/<table>/`.
    pub group: String,
    pub keyspace: String,
    pub table: String,
    /// Format version of the child (BIG `ma` … `oa`, BTI `da`); the receiver names the
    /// files with it.
    pub version: String,
    /// `big` (default, omitted) or `bti`.
    #[serde(default, skip_serializing_if = "ManifestFormat::is_big")]
    pub format: ManifestFormat,
    pub import: Import,
    /// Informational: the sending node and the parent's Data.db file name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// The node this child is for (RangeStream `spec.destination.nodeName`). A receiver
    /// started with `--node` refuses (421 WrongDestination) a manifest naming another node,
    /// before it writes anything: a Service in front of several receivers, or a stale
    /// endpoint, must not land data on the wrong replica.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destination: Option<String>,
    /// In send order.
    pub files: Vec<FileEntry>,
}

/// Why a manifest was refused; `field` names where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("manifest {field}: {what}")]
pub struct ManifestError {
    pub field: String,
    pub what: String,
}

fn err(field: impl Into<String>, what: impl Into<String>) -> ManifestError {
    ManifestError {
        field: field.into(),
        what: what.into(),
    }
}

impl Manifest {
    pub fn file(&self, component: &str) -> Option<&FileEntry> {
        self.files.iter().find(|f| f.component == component)
    }

    pub fn total_bytes(&self) -> u64 {
        self.files.iter().map(|f| f.size).sum()
    }

    pub fn is_compressed(&self) -> bool {
        self.file("CompressionInfo.db").is_some()
    }

    /// Every rule of docs/stream.md "Manifest"; `decode` calls it, senders call it before
    /// sending so that a bad request fails on the source with the same message.
    pub fn validate(&self) -> Result<(), ManifestError> {
        check_id("transfer", &self.transfer)?;
        check_id("group", &self.group)?;
        check_identifier("keyspace", &self.keyspace)?;
        check_identifier("table", &self.table)?;
        match (crate::sstable::Version::parse(&self.version), self.format) {
            (Some(v), ManifestFormat::Big) if v.is_supported_big() => {}
            (Some(v), ManifestFormat::Bti) if v.is_supported_bti() => {}
            (_, ManifestFormat::Bti) => {
                return Err(err(
                    "version",
                    format!("{:?} is not a supported BTI version (da)", self.version),
                ))
            }
            _ => {
                return Err(err(
                    "version",
                    format!(
                        "{:?} is not a supported BIG version (one of {})",
                        self.version,
                        crate::sstable::descriptor::SUPPORTED_BIG_VERSIONS.join(", ")
                    ),
                ))
            }
        }
        if let Some(s) = &self.source {
            if s.len() > 512 || s.chars().any(char::is_control) {
                return Err(err("source", "expected at most 512 printable characters"));
            }
        }
        if let Some(d) = &self.destination {
            if d.is_empty() || d.len() > 253 || d.chars().any(|c| c.is_control() || c == '/') {
                return Err(err(
                    "destination",
                    "expected a node name: 1 to 253 printable characters, no '/'",
                ));
            }
        }
        if self.files.len() > ALLOWED_COMPONENTS.len() {
            return Err(err(
                "files",
                format!(
                    "{} entries, at most {} components may be sent",
                    self.files.len(),
                    ALLOWED_COMPONENTS.len()
                ),
            ));
        }
        for (i, f) in self.files.iter().enumerate() {
            let field = format!("files[{i}].component");
            if !ALLOWED_COMPONENTS.contains(&f.component.as_str()) {
                return Err(err(
                    field,
                    format!(
                        "{:?} is not an allowed component name (one of {})",
                        f.component,
                        ALLOWED_COMPONENTS.join(", ")
                    ),
                ));
            }
            if self.files[..i].iter().any(|g| g.component == f.component) {
                return Err(err(field, format!("{} listed twice", f.component)));
            }
            let max = match f.component.as_str() {
                "Data.db" => MAX_DATA_BYTES,
                "CompressionInfo.db" | "CRC.db" => MAX_CHUNK_TABLE_BYTES,
                _ => MAX_COMPONENT_BYTES,
            };
            if f.size > max {
                return Err(err(
                    format!("files[{i}].size"),
                    format!("{} declares {} bytes, at most {max}", f.component, f.size),
                ));
            }
        }
        let (index, foreign) = self.format.index_components();
        for required in ["Data.db", "Statistics.db"].iter().chain(index) {
            if self.file(required).is_none() {
                return Err(err("files", format!("{required} is missing")));
            }
        }
        if let Some(f) = foreign.iter().find(|c| self.file(c).is_some()) {
            return Err(err("files", format!("{f} in a {:?} sstable", self.format)));
        }
        let pos = |c: &str| self.files.iter().position(|f| f.component == c);
        match (pos("CompressionInfo.db"), pos("CRC.db")) {
            (Some(_), Some(_)) => {
                return Err(err(
                    "files",
                    "both CompressionInfo.db and CRC.db: an sstable is compressed or not",
                ))
            }
            (None, None) => {
                return Err(err(
                    "files",
                    "neither CompressionInfo.db nor CRC.db: the receiver checks every chunk of Data.db against one of them",
                ))
            }
            (Some(t), None) | (None, Some(t)) => {
                if pos("Data.db").is_some_and(|d| d < t) {
                    return Err(err(
                        "files",
                        format!(
                            "Data.db is sent before {}: its chunk table must arrive first",
                            self.files[t].component
                        ),
                    ));
                }
            }
        }
        Ok(())
    }
}

/// A transfer id or group: `[A-Za-z0-9_.-]{1,160}`, not starting with `.` (so never `.`,
/// `..` or a hidden directory); no `/`, so it is always one path component.
pub fn check_id(field: &str, s: &str) -> Result<(), ManifestError> {
    if s.is_empty() || s.len() > MAX_ID_LENGTH {
        return Err(err(
            field,
            format!(
                "expected 1 to {MAX_ID_LENGTH} characters, found {}",
                s.len()
            ),
        ));
    }
    if s.starts_with('.') {
        return Err(err(field, format!("{s:?} must not start with '.'")));
    }
    if let Some(c) = s
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')))
    {
        return Err(err(
            field,
            format!("{s:?} contains {c:?}; allowed: A-Z a-z 0-9 _ . -"),
        ));
    }
    Ok(())
}

/// Cassandra's rule for keyspace and table names (`SchemaConstants.isValidName`): 1 to 48
/// of `[A-Za-z0-9_]`. Quoted identifiers cannot name anything else on disk.
pub fn check_identifier(field: &str, s: &str) -> Result<(), ManifestError> {
    if s.is_empty() || s.len() > MAX_NAME_LENGTH {
        return Err(err(
            field,
            format!("{s:?}: expected 1 to {MAX_NAME_LENGTH} characters (Cassandra's NAME_LENGTH)"),
        ));
    }
    if let Some(c) = s
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '_'))
    {
        return Err(err(
            field,
            format!("{s:?} contains {c:?}; Cassandra names are [A-Za-z0-9_]"),
        ));
    }
    Ok(())
}

/// Serializes a manifest into its envelope. Does not validate (tests build bad ones).
pub fn encode(m: &Manifest) -> Vec<u8> {
    // Serializing plain strings, integers and enums cannot fail.
    let json = serde_json::to_vec(m).unwrap_or_default();
    let mut out = Vec::with_capacity(json.len() + 14);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&PROTOCOL_VERSION.to_be_bytes());
    out.extend_from_slice(&(json.len() as u32).to_be_bytes());
    out.extend_from_slice(&json);
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_be_bytes());
    out
}

/// Parses and validates an envelope.
pub fn decode(bytes: &[u8]) -> Result<Manifest, ManifestError> {
    if bytes.len() > MAX_MANIFEST_BYTES {
        return Err(err(
            "length",
            format!("{} bytes, at most {MAX_MANIFEST_BYTES}", bytes.len()),
        ));
    }
    if bytes.len() < 14 {
        return Err(err(
            "length",
            format!("{} bytes, shorter than the 14-byte envelope", bytes.len()),
        ));
    }
    if &bytes[..4] != MAGIC {
        return Err(err(
            "magic",
            format!("expected \"CLVM\", found {:02x?}", &bytes[..4]),
        ));
    }
    let version = u16::from_be_bytes([bytes[4], bytes[5]]);
    if version != PROTOCOL_VERSION {
        return Err(err(
            "version",
            format!("protocol version {version}, this receiver speaks {PROTOCOL_VERSION}"),
        ));
    }
    let len = u32::from_be_bytes([bytes[6], bytes[7], bytes[8], bytes[9]]) as usize;
    if len != bytes.len() - 14 {
        return Err(err(
            "length",
            format!(
                "payload length {len}, but {} bytes follow the header",
                bytes.len() - 14
            ),
        ));
    }
    let body_end = 10 + len;
    let stored = u32::from_be_bytes([
        bytes[body_end],
        bytes[body_end + 1],
        bytes[body_end + 2],
        bytes[body_end + 3],
    ]);
    let computed = crc32fast::hash(&bytes[..body_end]);
    if stored != computed {
        return Err(err(
            "crc32",
            format!("stored {stored:08x}, computed {computed:08x}"),
        ));
    }
    let m: Manifest =
        serde_json::from_slice(&bytes[10..body_end]).map_err(|e| err("payload", e.to_string()))?;
    m.validate()?;
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    pub fn sample() -> Manifest {
        Manifest {
            transfer: "3f2a.nb-5.0".into(),
            group: "move-ks".into(),
            keyspace: "ks".into(),
            table: "t_1".into(),
            version: "nb".into(),
            format: Default::default(),
            import: Import::None,
            source: Some("node-a nb-5-big-Data.db".into()),
            destination: Some("node-b".into()),
            files: vec![
                FileEntry {
                    component: "CompressionInfo.db".into(),
                    size: 43,
                    crc32: 1,
                },
                FileEntry {
                    component: "Statistics.db".into(),
                    size: 4000,
                    crc32: 2,
                },
                FileEntry {
                    component: "Index.db".into(),
                    size: 10,
                    crc32: 3,
                },
                FileEntry {
                    component: "Data.db".into(),
                    size: 1 << 30,
                    crc32: 4,
                },
            ],
        }
    }

    #[test]
    fn round_trip() {
        let m = sample();
        let b = encode(&m);
        assert_eq!(decode(&b).unwrap(), m);
    }

    #[test]
    fn every_flipped_bit_and_every_truncation_is_refused() {
        let b = encode(&sample());
        for i in 0..b.len() {
            for bit in 0..8 {
                let mut c = b.clone();
                c[i] ^= 1 << bit;
                assert!(decode(&c).is_err(), "flip byte {i} bit {bit} accepted");
            }
        }
        for n in 0..b.len() {
            assert!(decode(&b[..n]).is_err(), "truncated to {n} accepted");
        }
    }

    fn refused(m: Manifest, field: &str) {
        let e = decode(&encode(&m)).unwrap_err();
        assert!(e.field.starts_with(field), "{e} (wanted field {field})");
    }

    #[test]
    fn hostile_names_are_refused() {
        for bad in [
            "../Data.db",
            "/etc/passwd",
            "Data.db/",
            "..",
            "x/../Data.db",
            "TOC.txt",
            "Digest.crc32",
            "",
        ] {
            let mut m = sample();
            m.files[2].component = bad.into();
            refused(m, "files[2].component");
        }
        for bad in ["..", ".x", "a/b", "", "a b", &"x".repeat(161)] {
            let mut m = sample();
            m.transfer = bad.to_string();
            refused(m, "transfer");
        }
        for bad in ["k-s", "ks/..", "", &"k".repeat(49), "ks\u{e9}"] {
            let mut m = sample();
            m.keyspace = bad.to_string();
            refused(m.clone(), "keyspace");
            let mut m2 = sample();
            m2.table = bad.to_string();
            refused(m2, "table");
        }
        let mut m = sample();
        m.version = "la".into();
        refused(m, "version");
    }

    #[test]
    fn sizes_and_order_are_bounded() {
        let mut m = sample();
        m.files[3].size = MAX_DATA_BYTES + 1;
        refused(m, "files[3].size");
        let mut m = sample();
        m.files[0].size = MAX_CHUNK_TABLE_BYTES + 1;
        refused(m, "files[0].size");
        let mut m = sample();
        m.files.swap(0, 3);
        refused(m, "files");
        let mut m = sample();
        m.files.remove(0);
        refused(m, "files");
        let mut m = sample();
        m.files.push(m.files[1].clone());
        refused(m, "files[4]");
    }

    #[test]
    fn unknown_fields_and_oversized_envelopes_are_refused() {
        let m = sample();
        let mut v = serde_json::to_value(&m).unwrap();
        v["extra"] = serde_json::json!(1);
        let json = serde_json::to_vec(&v).unwrap();
        let mut b = Vec::new();
        b.extend_from_slice(MAGIC);
        b.extend_from_slice(&PROTOCOL_VERSION.to_be_bytes());
        b.extend_from_slice(&(json.len() as u32).to_be_bytes());
        b.extend_from_slice(&json);
        let crc = crc32fast::hash(&b);
        b.extend_from_slice(&crc.to_be_bytes());
        assert_eq!(decode(&b).unwrap_err().field, "payload");
        assert_eq!(
            decode(&vec![0u8; MAX_MANIFEST_BYTES + 1])
                .unwrap_err()
                .field,
            "length"
        );
    }
}
