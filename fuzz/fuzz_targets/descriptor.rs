//! `Descriptor::from_path` on an arbitrary UTF-8 path.
//!
//! Properties: parsing never panics; a parsed (descriptor, component) names a path that
//! parses back to the same pair; the version's feature flags and `require_supported`
//! never panic. Also `Version`, `SSTableId` and `Component` on their own: a component
//! name round-trips through `Component::parse`/`file_name`.
#![no_main]

use std::path::Path;

use cleave::sstable::descriptor::{Component, Descriptor, SSTableId, Version};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    assert_eq!(Component::parse(s).file_name(), s);
    if let Some(id) = SSTableId::parse(s) {
        assert_eq!(SSTableId::parse(&id.to_string()), Some(id));
    }
    if let Some(v) = Version::parse(s) {
        assert_eq!(v.as_str(), s);
    }

    let path = Path::new(s);
    let Ok((d, c)) = Descriptor::from_path(path) else {
        return;
    };
    let v = d.version;
    let _ = (
        v.is_supported_big(),
        v.has_commit_log_lower_bound(),
        v.has_commit_log_intervals(),
        v.has_accurate_min_max(),
        v.has_legacy_min_max(),
        v.has_originating_host_id(),
        v.has_max_compressed_length(),
        v.has_pending_repair(),
        v.has_metadata_checksum(),
        v.has_old_bf_format(),
        v.has_improved_min_max(),
        v.has_partition_level_deletions_marker(),
        v.has_key_range(),
        v.has_uint_deletion_time(),
        v.has_token_space_coverage(),
        c.is_secondary_index(),
    );
    let _ = d.require_supported();
    let again = d.path(&c);
    let (d2, c2) = Descriptor::from_path(&again)
        .unwrap_or_else(|e| panic!("{again:?} (from {s:?}) does not parse: {e}"));
    assert_eq!(d2, d, "{s:?} -> {again:?}");
    assert_eq!(c2, c, "{s:?} -> {again:?}");
    assert_eq!(
        d.file_name(&c),
        again.file_name().unwrap().to_str().unwrap()
    );
});
