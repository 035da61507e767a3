//! A token bucket for `maxBytesPerSecond`: the copy, regrid and stream paths take tokens for
//! the bytes they move; extents shared by reflink move no bytes and take none.
//!
//! The arithmetic is pure (`Bucket::reserve` over an explicit `now`) so it is unit-tested
//! without sleeping; `TokenBucket` wraps it in a mutex for the threads of one job and sleeps
//! (blocking code) or returns the delay (async code sleeps with tokio).

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The pure bucket: `rate` bytes a second, at most `burst` bytes banked.
#[derive(Debug, Clone)]
pub struct Bucket {
    rate: f64,
    burst: f64,
    /// Tokens available at `at`; negative when callers were told to wait for a debt.
    tokens: f64,
    at: Instant,
}

impl Bucket {
    /// A bucket that starts full. `burst` is clamped to at least one second's worth / 10 so
    /// that a large single reservation is paid as debt instead of refused.
    pub fn new(bytes_per_second: u64, burst: u64, now: Instant) -> Bucket {
        let rate = bytes_per_second.max(1) as f64;
        let burst = (burst as f64).max(rate / 10.0);
        Bucket {
            rate,
            burst,
            tokens: burst,
            at: now,
        }
    }

    /// Takes `n` tokens at `now` and returns how long the caller must wait before moving the
    /// bytes. Debt carries over, so the long-run rate is `rate` whatever the request sizes.
    pub fn reserve(&mut self, n: u64, now: Instant) -> Duration {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.rate).min(self.burst);
        self.at = now.max(self.at);
        self.tokens -= n as f64;
        if self.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-self.tokens / self.rate)
        }
    }
}

/// A bucket shared by the threads (or tasks) of one job.
#[derive(Debug)]
pub struct TokenBucket {
    inner: Mutex<Bucket>,
    bytes_per_second: u64,
}

impl TokenBucket {
    /// Burst of 1/10 s of the rate (at least 64 KiB): short enough that a measured rate over a
    /// few seconds is within a few percent of the limit.
    pub fn new(bytes_per_second: u64) -> TokenBucket {
        let burst = (bytes_per_second / 10).max(64 * 1024);
        TokenBucket {
            inner: Mutex::new(Bucket::new(bytes_per_second, burst, Instant::now())),
            bytes_per_second,
        }
    }

    pub fn bytes_per_second(&self) -> u64 {
        self.bytes_per_second
    }

    /// The delay before `n` bytes may move (async callers sleep it themselves).
    pub fn reserve(&self, n: u64) -> Duration {
        let mut b = match self.inner.lock() {
            Ok(b) => b,
            // A panicking holder cannot leave the arithmetic half-updated in a way that
            // matters: at worst one reservation is lost.
            Err(poisoned) => poisoned.into_inner(),
        };
        b.reserve(n, Instant::now())
    }

    /// Blocking callers: take `n` tokens and sleep until the bytes may move.
    pub fn take_blocking(&self, n: u64) {
        let d = self.reserve(n);
        if !d.is_zero() {
            std::thread::sleep(d);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_run_rate_is_the_limit_whatever_the_request_sizes() {
        let t0 = Instant::now();
        let mut b = Bucket::new(1_000_000, 100_000, t0);
        // Simulate a caller that always waits exactly what it is told.
        let mut now = t0;
        let mut moved = 0u64;
        for i in 0..1000u64 {
            let n = 1 + (i * 7919) % 200_000;
            now += b.reserve(n, now);
            moved += n;
        }
        let secs = now.duration_since(t0).as_secs_f64();
        let rate = moved as f64 / secs;
        // The initial burst (0.1 s worth) is the only excess.
        assert!(
            (rate - 1_000_000.0).abs() / 1_000_000.0 < 0.01,
            "rate {rate}"
        );
    }

    #[test]
    fn a_full_bucket_lets_a_burst_through_without_waiting() {
        let t0 = Instant::now();
        let mut b = Bucket::new(1_000_000, 100_000, t0);
        assert_eq!(b.reserve(100_000, t0), Duration::ZERO);
        assert!(b.reserve(1, t0) > Duration::ZERO);
    }

    #[test]
    fn idle_time_refills_only_up_to_the_burst() {
        let t0 = Instant::now();
        let mut b = Bucket::new(1_000, 1_000, t0);
        let _ = b.reserve(1_000, t0);
        let later = t0 + Duration::from_secs(3600);
        assert_eq!(b.reserve(1_000, later), Duration::ZERO);
        assert!(b.reserve(100, later) >= Duration::from_millis(99));
    }
}
