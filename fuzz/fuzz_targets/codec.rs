//! `Codec::decompress` for every codec, `max_len` 65536 (the largest usual chunk).
//!
//! Properties: decompressing never panics; on success the output is at most `max_len`
//! bytes and, for the codecs cleave can write, compresses and decompresses back to
//! itself; the output buffer never grows past `max_len + 1` bytes, and no call holds more
//! heap than `HEAP_LIMIT` at any moment, whatever length the payload's header claims (a
//! global allocator measures the peak). Set CODEC_PEAK=1 to print each call's peak.
#![no_main]

use std::alloc::{GlobalAlloc, Layout, System};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use cleave::sstable::compression::Codec;
use libfuzzer_sys::fuzz_target;

const MAX_LEN: usize = 65536;
/// The output (Deflate reads one byte past `max_len` to tell an oversized chunk) plus
/// 64 KiB for a decoder's fixed state (miniz_oxide's inflater is about 43 KiB).
const HEAP_LIMIT: usize = MAX_LEN + 1 + 64 * 1024;

struct Counting;
static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(l) };
        if !p.is_null() {
            let live = LIVE.fetch_add(l.size(), Relaxed) + l.size();
            PEAK.fetch_max(live, Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        unsafe { System.dealloc(p, l) };
        LIVE.fetch_sub(l.size(), Relaxed);
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        let q = unsafe { System.realloc(p, l, new) };
        if !q.is_null() {
            // Both blocks may exist during the copy: count the new one before freeing the old.
            let live = LIVE.fetch_add(new, Relaxed) + new;
            PEAK.fetch_max(live, Relaxed);
            LIVE.fetch_sub(l.size(), Relaxed);
        }
        q
    }
}

#[global_allocator]
static A: Counting = Counting;

const CODECS: [Codec; 6] = [
    Codec::Lz4,
    Codec::Snappy,
    Codec::Deflate,
    Codec::Noop,
    Codec::Zstd,
    Codec::Unknown,
];

fuzz_target!(|data: &[u8]| {
    let file = Path::new("fuzz-Data.db");
    for c in CODECS {
        let mut out = Vec::new();
        let base = LIVE.load(Relaxed);
        PEAK.store(base, Relaxed);
        let r = c.decompress(file, 0, data, MAX_LEN, &mut out);
        let peak = PEAK.load(Relaxed) - base;
        if std::env::var_os("CODEC_PEAK").is_some() {
            eprintln!(
                "{c:?} {} -> {:?} peak {peak} cap {}",
                data.len(),
                r.as_ref().map(|_| out.len()).map_err(|e| e.to_string()),
                out.capacity()
            );
        }
        assert!(peak <= HEAP_LIMIT, "{c:?}: peak heap {peak} bytes");
        assert!(
            out.capacity() <= MAX_LEN + 1,
            "{c:?}: {} byte buffer",
            out.capacity()
        );
        if r.is_err() {
            continue;
        }
        assert!(out.len() <= MAX_LEN, "{c:?}: {} bytes out", out.len());
        if c == Codec::Unknown {
            panic!("{c:?} decompressed");
        }
        let mut z = Vec::new();
        c.compress(file, &out, &mut z).expect("compress");
        let mut again = Vec::new();
        c.decompress(file, 0, &z, MAX_LEN, &mut again)
            .unwrap_or_else(|e| panic!("{c:?}: own output does not decompress: {e}"));
        assert_eq!(again, out, "{c:?}: round trip");
    }
});
