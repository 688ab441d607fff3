//! Per-token rate limiting of ingest: a token bucket per API token, in this server's memory (each
//! replica limits on its own). A collector over its rate gets 429 with `Retry-After` and, being a
//! retrying shipper, comes back later.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

#[derive(Debug)]
pub struct RateLimiter {
    /// Requests per second a token may make on average; 0 turns limiting off.
    rate: f64,
    /// Requests a token may make at once after a quiet spell.
    burst: f64,
    buckets: Mutex<HashMap<i64, (f64, Instant)>>,
}

impl RateLimiter {
    pub fn new(rate: f64, burst: f64) -> RateLimiter {
        RateLimiter {
            rate,
            burst: burst.max(1.0),
            buckets: Mutex::new(HashMap::new()),
        }
    }

    pub fn rate(&self) -> f64 {
        self.rate
    }

    pub fn burst(&self) -> f64 {
        self.burst
    }

    /// Takes one request from `key`'s bucket, or says how long until one is there.
    pub fn check(&self, key: i64, now: Instant) -> Result<(), Duration> {
        if self.rate <= 0.0 {
            return Ok(());
        }
        let mut buckets = self.buckets.lock().expect("not poisoned");
        let (tokens, at) = buckets.entry(key).or_insert((self.burst, now));
        *tokens = (*tokens + now.duration_since(*at).as_secs_f64() * self.rate).min(self.burst);
        *at = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - *tokens) / self.rate))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_gets_its_burst_then_its_rate_and_tokens_are_apart() {
        let l = RateLimiter::new(2.0, 3.0);
        let t0 = Instant::now();
        for _ in 0..3 {
            assert!(l.check(1, t0).is_ok());
        }
        let wait = l.check(1, t0).unwrap_err();
        assert!((wait.as_secs_f64() - 0.5).abs() < 1e-9, "{wait:?}");
        assert!(l.check(2, t0).is_ok(), "another token has its own bucket");
        assert!(l.check(1, t0 + Duration::from_millis(500)).is_ok());
        assert!(RateLimiter::new(0.0, 1.0).check(1, t0).is_ok());
    }
}
