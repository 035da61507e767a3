//! TOC.txt.
//!
//! Properties: parsing never panics; a parsed TOC serializes back to exactly the input
//! (names and order are kept) and lists every component it parsed.
#![no_main]

use std::path::Path;

use cleave::sstable::descriptor::Toc;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let file = Path::new("fuzz-TOC.txt");
    let Ok(toc) = Toc::parse(file, data) else {
        return;
    };
    assert_eq!(toc.serialize(), data, "serialize is not the input bytes");
    for c in &toc.components {
        assert!(toc.contains(c));
        assert!(!c.file_name().is_empty());
    }
    assert_eq!(Toc::parse(file, &toc.serialize()).unwrap(), toc);
});
