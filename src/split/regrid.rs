//! `regrid` on every core (issue 16, deliverable 4): the chunks of a child re-encoded onto a
//! fresh grid by a few threads, written in order by the caller's thread.
//!
//! A regrid child's chunk `k` holds bytes `[k·L, (k+1)·L)` of the child's runs laid back to
//! back (`L` = the parent's `chunk_length`), so any chunk can be built without the ones
//! before it: decode the one or two parent chunks it overlaps, cut, compress. The chunks are
//! cut into batches (about 1 MiB of content each); workers claim batches in order, encode
//! each into a reused buffer and hand it to the caller's thread, which writes batches
//! strictly in order (the output is the single-threaded one byte for byte: same chunks,
//! same codec, same order). At most `window` batches are claimed and not yet written, so
//! memory is bounded whatever the child's size; buffers go back to a free list once
//! written. The writer takes the throttle's tokens (`Out::write`), so a throttled regrid
//! stalls its workers through the window instead of queueing encoded bytes.
//!
//! Errors keep their order: batches are written in order and a worker stops its batch at
//! its first error, so the error returned is the one the single-threaded pass met first
//! (a parent chunk's CRC or length, naming the parent file and offset). The caller's staging
//! guard removes the partial child.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Condvar, Mutex, MutexGuard};

use crate::sstable::compression::{CodecState, CompressionInfo};
use crate::sstable::data::DataReader;
use crate::sstable::{FormatError, Result};

/// Uncompressed bytes a batch aims at: large enough that the hand-off costs nothing next to
/// the encoding, small enough that a window of them is a few MiB.
const BATCH_BYTES: u64 = 1 << 20;

/// How a regrid is spread over threads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tuning {
    /// Encoding threads; 1 encodes on the caller's thread (no thread is started).
    pub threads: usize,
    /// Chunks per batch.
    pub batch_chunks: usize,
    /// Batches claimed and not yet written, at most.
    pub window: usize,
}

/// The environment variable that bounds the encoding threads (a positive integer; `1` is
/// the single-threaded pass). Unset or not a positive integer: every core this process may
/// use (`available_parallelism`, which follows the cgroup's CPU quota in a pod).
pub const THREADS_ENV: &str = "CLEAVE_REGRID_THREADS";

impl Tuning {
    /// Every core (or `CLEAVE_REGRID_THREADS`), ~1 MiB batches, two batches per thread.
    pub fn for_chunk_length(chunk_length: u64) -> Tuning {
        let threads = std::env::var(THREADS_ENV)
            .ok()
            .and_then(|v| v.trim().parse::<usize>().ok())
            .filter(|&n| n > 0)
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
        Tuning::new(threads, chunk_length)
    }

    pub fn new(threads: usize, chunk_length: u64) -> Tuning {
        let threads = threads.max(1);
        Tuning {
            threads,
            batch_chunks: (BATCH_BYTES / chunk_length.max(1)).max(1) as usize,
            window: 2 * threads,
        }
    }
}

/// The child's runs laid back to back: which parent bytes a child position holds.
struct Runs<'a> {
    runs: &'a [(u64, u64)],
    /// Child position where each run starts.
    starts: Vec<u64>,
    total: u64,
}

impl<'a> Runs<'a> {
    fn new(runs: &'a [(u64, u64)]) -> Runs<'a> {
        let mut starts = Vec::with_capacity(runs.len());
        let mut total = 0u64;
        for &(a, b) in runs {
            starts.push(total);
            total += b.saturating_sub(a);
        }
        Runs {
            runs,
            starts,
            total,
        }
    }
}

/// What every worker reads and encodes with.
struct Job<'a> {
    parent_path: &'a Path,
    ci: &'a CompressionInfo,
    runs: Runs<'a>,
    out_path: &'a Path,
    chunks: u64,
    tuning: Tuning,
}

/// One batch of encoded chunks: payloads with their CRC trailers, back to back.
#[derive(Default)]
struct Batch {
    bytes: Vec<u8>,
    /// Stored length (payload + CRC) of each chunk.
    lens: Vec<u32>,
}

/// A worker's buffers, reused batch after batch.
struct Worker {
    reader: DataReader,
    content: Vec<u8>,
    payload: Vec<u8>,
    codec: CodecState,
}

impl Job<'_> {
    /// Child chunk `k`'s content into `w.content`.
    fn fill(&self, k: u64, w: &mut Worker) -> Result<()> {
        let l = self.ci.chunk_length as u64;
        let mut v = k * l;
        let v_end = (v + l).min(self.runs.total);
        w.content.clear();
        let mut r = self
            .runs
            .starts
            .partition_point(|&s| s <= v)
            .saturating_sub(1);
        while v < v_end {
            let (first, end) = self.runs.runs[r];
            let run_end = self.runs.starts[r] + end.saturating_sub(first);
            if v >= run_end {
                r += 1;
                continue;
            }
            let pos = first + (v - self.runs.starts[r]);
            let c = pos / l;
            let chunk = w.reader.chunk(c as usize)?;
            let from = (pos - c * l) as usize;
            let to = ((end - c * l) as usize).min(chunk.len());
            if to <= from {
                return Err(FormatError::corrupt(
                    self.parent_path,
                    Some(self.ci.offsets.at(c)?),
                    format!(
                        "chunk {c} decodes to {} bytes, position {pos} needs more",
                        chunk.len()
                    ),
                ));
            }
            let take = (to - from).min((v_end - v) as usize);
            w.content.extend_from_slice(&chunk[from..from + take]);
            v += take as u64;
        }
        Ok(())
    }

    /// Encodes batch `b` into `out` (cleared first).
    fn encode(&self, b: usize, w: &mut Worker, out: &mut Batch) -> Result<()> {
        out.bytes.clear();
        out.lens.clear();
        let k0 = b as u64 * self.tuning.batch_chunks as u64;
        let k1 = (k0 + self.tuning.batch_chunks as u64).min(self.chunks);
        for k in k0..k1 {
            self.fill(k, w)?;
            super::data::encode_chunk_into(
                self.out_path,
                self.ci,
                &w.content,
                &mut w.codec,
                &mut w.payload,
            )?;
            out.bytes.extend_from_slice(&w.payload);
            out.bytes
                .extend_from_slice(&crc32fast::hash(&w.payload).to_be_bytes());
            out.lens.push(w.payload.len() as u32 + 4);
        }
        Ok(())
    }

    fn batches(&self) -> usize {
        self.chunks.div_ceil(self.tuning.batch_chunks as u64) as usize
    }
}

/// The window the workers wait on.
struct Window {
    /// Batches written so far (batch `done` is the next to write).
    done: usize,
    abort: bool,
    free: Vec<Batch>,
    /// The most batches claimed and not yet written at any time.
    peak: usize,
}

struct Shared {
    next: AtomicUsize,
    window: Mutex<Window>,
    moved: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Window> {
        // A worker that panicked holds nothing the others could see half-updated.
        self.window.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn abort(&self) {
        self.lock().abort = true;
        self.moved.notify_all();
    }
}

/// Stops the others when a worker unwinds, so that the writer is not left waiting.
struct AbortOnPanic<'a>(&'a Shared);

impl Drop for AbortOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.abort();
        }
    }
}

/// Stores a batch of encoded chunks (payloads with CRCs, and their stored lengths) and
/// returns the child offset where it starts.
pub type Emit<'a> = dyn FnMut(&[u8], &[u32]) -> Result<u64> + 'a;

/// The chunks of a compressed regrid child, in order: `emit` stores a batch (payloads with
/// CRC trailers, `lens` their stored lengths) and returns the child offset where it starts.
/// Returns each chunk's offset, the extra chunk included (when the length is a multiple of
/// the chunk length).
pub(super) fn chunks(
    reader: &DataReader,
    parent_path: &Path,
    ci: &CompressionInfo,
    runs: &[(u64, u64)],
    out_path: &Path,
    tuning: Tuning,
    emit: &mut Emit<'_>,
) -> Result<Vec<u64>> {
    let runs = Runs::new(runs);
    let l = ci.chunk_length as u64;
    let job = Job {
        parent_path,
        ci,
        chunks: runs.total.div_ceil(l),
        runs,
        out_path,
        tuning,
    };
    let mut offsets = Vec::with_capacity(job.chunks as usize + 1);
    let mut record = |batch: &Batch, offsets: &mut Vec<u64>| -> Result<()> {
        let mut at = emit(&batch.bytes, &batch.lens)?;
        for &n in &batch.lens {
            offsets.push(at);
            at += u64::from(n);
        }
        Ok(())
    };
    let threads = tuning.threads.min(job.batches());
    if threads <= 1 {
        let mut w = Worker {
            reader: reader.try_clone()?,
            content: Vec::with_capacity(l as usize),
            payload: Vec::new(),
            codec: CodecState::for_table(out_path, ci)?,
        };
        let mut batch = Batch::default();
        for b in 0..job.batches() {
            job.encode(b, &mut w, &mut batch)?;
            record(&batch, &mut offsets)?;
        }
    } else {
        parallel(&job, reader, threads, &mut |b| record(b, &mut offsets))?;
    }
    if job.runs.total.is_multiple_of(l) {
        let p = super::data::extra_chunk(out_path, ci)?;
        let mut batch = Batch::default();
        batch.bytes.extend_from_slice(&p);
        batch
            .bytes
            .extend_from_slice(&crc32fast::hash(&p).to_be_bytes());
        batch.lens.push(p.len() as u32 + 4);
        record(&batch, &mut offsets)?;
    }
    Ok(offsets)
}

/// `threads` workers encode, this thread writes in order. Returns the most batches that
/// were ever claimed and not yet written (at most `window`).
fn parallel(
    job: &Job,
    reader: &DataReader,
    threads: usize,
    write: &mut dyn FnMut(&Batch) -> Result<()>,
) -> Result<usize> {
    let n = job.batches();
    let shared = Shared {
        next: AtomicUsize::new(0),
        window: Mutex::new(Window {
            done: 0,
            abort: false,
            free: Vec::new(),
            peak: 0,
        }),
        moved: Condvar::new(),
    };
    let mut workers = Vec::with_capacity(threads);
    for _ in 0..threads {
        workers.push(Worker {
            reader: reader.try_clone()?,
            content: Vec::with_capacity(job.ci.chunk_length as usize),
            payload: Vec::new(),
            codec: CodecState::for_table(job.out_path, job.ci)?,
        });
    }
    std::thread::scope(|s| {
        let (tx, rx) = mpsc::channel::<(usize, Result<Batch>)>();
        for mut w in workers {
            let tx = tx.clone();
            let shared = &shared;
            s.spawn(move || {
                let _guard = AbortOnPanic(shared);
                loop {
                    let b = shared.next.fetch_add(1, Ordering::Relaxed);
                    if b >= n {
                        return;
                    }
                    let mut batch = {
                        let mut g = shared.lock();
                        while !g.abort && b >= g.done + job.tuning.window {
                            g = shared.moved.wait(g).unwrap_or_else(|p| p.into_inner());
                        }
                        if g.abort {
                            return;
                        }
                        g.peak = g.peak.max(b + 1 - g.done);
                        g.free.pop().unwrap_or_default()
                    };
                    let r = job.encode(b, &mut w, &mut batch).map(|()| batch);
                    let failed = r.is_err();
                    if tx.send((b, r)).is_err() || failed {
                        return;
                    }
                }
            });
        }
        drop(tx);
        let result = write_in_order(job, n, &rx, &shared, write);
        if result.is_err() {
            shared.abort();
        }
        result.map(|()| shared.lock().peak)
    })
}

/// The writer's side of `parallel`: batches as they come, written strictly in order.
fn write_in_order(
    job: &Job,
    n: usize,
    rx: &mpsc::Receiver<(usize, Result<Batch>)>,
    shared: &Shared,
    write: &mut dyn FnMut(&Batch) -> Result<()>,
) -> Result<()> {
    let mut pending: BTreeMap<usize, Result<Batch>> = BTreeMap::new();
    let mut next = 0;
    while next < n {
        let Ok((b, r)) = rx.recv() else {
            // Every worker ended before the last batch: only after a panic, which the
            // scope re-raises.
            return Err(FormatError::io(
                job.out_path,
                std::io::Error::other("regrid workers ended before the last chunk"),
            ));
        };
        pending.insert(b, r);
        while let Some(r) = pending.remove(&next) {
            let mut batch = r?;
            write(&batch)?;
            batch.bytes.clear();
            batch.lens.clear();
            next += 1;
            let mut g = shared.lock();
            g.done = next;
            g.free.push(batch);
            drop(g);
            shared.moved.notify_all();
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sstable::compression::Codec;
    use std::fs::File;
    use std::io::Write;

    /// A compressed Data.db of `len` bytes in chunks of `l`, as Cassandra frames them.
    fn parent(dir: &Path, codec: &str, l: u32, len: usize, max: Option<u32>) -> CompressionInfo {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let data: Vec<u8> = (0..len)
            .map(|i| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                // Compressible runs with noise, and an incompressible stretch.
                if (i / 40_000) % 3 == 2 {
                    seed as u8
                } else {
                    (i / 61) as u8 ^ (seed % 4) as u8
                }
            })
            .collect();
        let mut ci = CompressionInfo {
            compressor: codec.into(),
            options: Vec::new(),
            chunk_length: l,
            max_compressed_length: max,
            data_length: len as u64,
            offsets: Vec::<u64>::new().into(),
        };
        let mut file = Vec::new();
        let mut offsets = Vec::new();
        for c in data.chunks(l as usize) {
            offsets.push(file.len() as u64);
            let p = super::super::data::encode_chunk(Path::new("p"), &ci, c).unwrap();
            file.extend_from_slice(&p);
            file.extend_from_slice(&crc32fast::hash(&p).to_be_bytes());
        }
        ci.offsets = offsets.into();
        File::create(dir.join("Data.db"))
            .unwrap()
            .write_all(&file)
            .unwrap();
        ci
    }

    /// The single-threaded regrid as it was before this module (split/data.rs at 1992dd2),
    /// kept as the reference the parallel bytes must equal.
    fn reference(
        reader: &mut DataReader,
        path: &Path,
        ci: &CompressionInfo,
        runs: &[(u64, u64)],
    ) -> Result<Vec<u8>> {
        let l = ci.chunk_length as u64;
        let total: u64 = runs.iter().map(|(a, b)| b - a).sum();
        let mut buf: Vec<u8> = Vec::new();
        let mut file = Vec::new();
        let mut emit = |p: Vec<u8>| {
            file.extend_from_slice(&p);
            file.extend_from_slice(&crc32fast::hash(&p).to_be_bytes());
        };
        for &(first, end) in runs {
            let mut pos = first;
            while pos < end {
                let c = pos / l;
                let chunk = reader.chunk(c as usize)?;
                let from = (pos - c * l) as usize;
                let to = ((end - c * l) as usize).min(chunk.len());
                if to <= from {
                    return Err(FormatError::corrupt(
                        path,
                        Some(ci.offsets.at(c)?),
                        format!(
                            "chunk {c} decodes to {} bytes, position {pos} needs more",
                            chunk.len()
                        ),
                    ));
                }
                let mut piece = &chunk[from..to];
                pos += piece.len() as u64;
                while !piece.is_empty() {
                    let take = piece.len().min(l as usize - buf.len());
                    buf.extend_from_slice(&piece[..take]);
                    piece = &piece[take..];
                    if buf.len() == l as usize {
                        emit(reference_encode(ci, &buf));
                        buf.clear();
                    }
                }
            }
        }
        if !buf.is_empty() {
            emit(reference_encode(ci, &buf));
        }
        if total.is_multiple_of(l) {
            emit(if ci.codec() == Codec::Noop {
                vec![0]
            } else {
                reference_encode(ci, &[])
            });
        }
        Ok(file)
    }

    /// `encode_chunk` as it was: a fresh encoder and buffer per chunk.
    fn reference_encode(ci: &CompressionInfo, content: &[u8]) -> Vec<u8> {
        let mut out = match ci.codec() {
            Codec::Lz4 => {
                let mut o = (content.len() as i32).to_le_bytes().to_vec();
                o.extend_from_slice(&lz4_flex::block::compress(content));
                o
            }
            Codec::Snappy => snap::raw::Encoder::new().compress_vec(content).unwrap(),
            Codec::Deflate => {
                let mut e =
                    flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
                e.write_all(content).unwrap();
                e.finish().unwrap()
            }
            _ => content.to_vec(),
        };
        if let Some(max) = ci.max_compressed_length {
            let max = max as usize;
            if out.len() >= max {
                out.clear();
                out.extend_from_slice(content);
                if out.len() < max {
                    out.resize(max, 0);
                }
            }
        }
        out
    }

    fn run(
        reader: &mut DataReader,
        ci: &CompressionInfo,
        runs: &[(u64, u64)],
        tuning: Tuning,
    ) -> Result<(Vec<u8>, Vec<u64>)> {
        let mut file = Vec::new();
        let offsets = chunks(
            reader,
            Path::new("Data.db"),
            ci,
            runs,
            Path::new("c"),
            tuning,
            &mut |bytes, _| {
                let at = file.len() as u64;
                file.extend_from_slice(bytes);
                Ok(at)
            },
        )?;
        Ok((file, offsets))
    }

    /// Offsets of the chunks of `file` by walking the stored lengths.
    fn check_offsets(file: &[u8], offsets: &[u64]) {
        assert_eq!(offsets[0], 0);
        assert!(offsets.windows(2).all(|w| w[0] < w[1]));
        assert!(*offsets.last().unwrap() < file.len() as u64);
    }

    #[test]
    fn parallel_bytes_equal_the_single_threaded_regrid() {
        let dir = tempfile::tempdir().unwrap();
        for (codec, l, max) in [
            ("LZ4Compressor", 16384u32, None),
            ("LZ4Compressor", 4096, Some(3900)),
            ("SnappyCompressor", 8192, None),
            ("DeflateCompressor", 16384, None),
            ("NoopCompressor", 4096, None),
        ] {
            let len = 700_000usize;
            let ci = parent(dir.path(), codec, l, len, max);
            let mut reader =
                DataReader::open(&dir.path().join("Data.db"), Some(ci.clone())).unwrap();
            let l = l as u64;
            let shapes: Vec<Vec<(u64, u64)>> = vec![
                vec![(0, len as u64)],
                vec![(5, 3 * l + 5)], // a multiple of the chunk: extra chunk
                vec![(100, 200_000), (200_000, 200_000), (333_333, 690_001)],
                vec![
                    (l, 2 * l),
                    (7, 9),
                    (500_000, 500_000 + l / 2),
                    (3, 4 * l + 1),
                ],
                vec![(10, 10)],
            ];
            for runs in &shapes {
                let want = reference(&mut reader, Path::new("Data.db"), &ci, runs).unwrap();
                for tuning in [
                    Tuning::new(1, l),
                    Tuning {
                        threads: 2,
                        batch_chunks: 1,
                        window: 1,
                    },
                    Tuning {
                        threads: 3,
                        batch_chunks: 2,
                        window: 4,
                    },
                    Tuning {
                        threads: 8,
                        batch_chunks: 3,
                        window: 16,
                    },
                    Tuning::new(4, l),
                ] {
                    let (got, offsets) = run(&mut reader, &ci, runs, tuning).unwrap();
                    assert!(got == want, "{codec} {runs:?} {tuning:?}: bytes differ");
                    check_offsets(&got, &offsets);
                }
            }
        }
    }

    #[test]
    fn a_corrupt_parent_chunk_fails_the_same_way_on_every_thread_count() {
        let dir = tempfile::tempdir().unwrap();
        let ci = parent(dir.path(), "LZ4Compressor", 4096, 400_000, None);
        // Flip a byte of chunk 40's payload: its CRC no longer matches.
        let path = dir.path().join("Data.db");
        let mut bytes = std::fs::read(&path).unwrap();
        let at = ci.offsets.at(40).unwrap() as usize + 2;
        bytes[at] ^= 0xff;
        std::fs::write(&path, &bytes).unwrap();
        let mut reader = DataReader::open(&path, Some(ci.clone())).unwrap();
        let runs = [(100u64, 390_000u64)];
        let want = reference(&mut reader, &path, &ci, &runs)
            .unwrap_err()
            .to_string();
        assert!(want.contains("chunk 40"), "{want}");
        for tuning in [
            Tuning::new(1, 4096),
            Tuning {
                threads: 2,
                batch_chunks: 1,
                window: 1,
            },
            Tuning {
                threads: 4,
                batch_chunks: 5,
                window: 3,
            },
        ] {
            let e = run(&mut reader, &ci, &runs, tuning).unwrap_err();
            assert_eq!(e.to_string(), want, "{tuning:?}");
            assert!(matches!(e, FormatError::Checksum { .. }), "{e:?}");
        }
    }

    #[test]
    fn the_window_bounds_the_batches_in_flight() {
        // A slow writer (a throttle): the workers run ahead by `window` batches, no more.
        let dir = tempfile::tempdir().unwrap();
        let ci = parent(dir.path(), "LZ4Compressor", 4096, 600_000, None);
        let reader = DataReader::open(&dir.path().join("Data.db"), Some(ci.clone())).unwrap();
        for window in [1usize, 3] {
            let tuning = Tuning {
                threads: 3,
                batch_chunks: 2,
                window,
            };
            let runs = [(0u64, 600_000u64)];
            let job = Job {
                parent_path: Path::new("Data.db"),
                ci: &ci,
                chunks: 600_000u64.div_ceil(4096),
                runs: Runs::new(&runs),
                out_path: Path::new("c"),
                tuning,
            };
            let mut written = 0usize;
            let peak = parallel(&job, &reader, tuning.threads, &mut |_| {
                std::thread::sleep(std::time::Duration::from_millis(3));
                written += 1;
                Ok(())
            })
            .unwrap();
            assert_eq!(written, job.batches());
            assert_eq!(peak, window, "window {window}");
        }
    }
}
