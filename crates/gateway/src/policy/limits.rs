//! Calls per minute per principal: a token bucket each, shared by the replicas in Redis, else
//! in memory.
//!
//! A principal allowed N calls a minute has a bucket of N tokens (the burst) that refills at
//! N a minute; a call takes one, and a call that finds less than one is refused with the time
//! until one is back. With `[store] redis` the bucket is in Redis (`cluster::Cluster::
//! take_token`, one atomic script), so N a minute holds across every replica. Without Redis,
//! or while it is unreachable, each process counts in its own buckets here: a restart forgets
//! them, and replicas each count their own (a principal may then make N calls a minute on each
//! replica).
//!
//! Memory stays bounded by the principals active within the last minute or so: a bucket that
//! would have refilled completely is the same as no bucket, so such buckets are dropped on a
//! sweep at most once a minute.

use std::{
    collections::HashMap,
    sync::Mutex,
    time::{Duration, Instant},
};

use crate::{Gateway, principal::Principal};

/// How often idle buckets are swept away.
const SWEEP_EVERY: Duration = Duration::from_secs(60);

/// Every principal's bucket.
#[derive(Debug)]
pub struct RateLimiter {
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    buckets: HashMap<String, Bucket>,
    last_sweep: Instant,
}

#[derive(Debug)]
struct Bucket {
    tokens: f64,
    updated: Instant,
    /// The per-minute figure the bucket was last used with (its size and refill rate).
    per_minute: u32,
}

impl Bucket {
    /// Tokens at `now`, never above the burst.
    fn refilled(&self, now: Instant, per_minute: u32) -> f64 {
        let elapsed = now.saturating_duration_since(self.updated).as_secs_f64();
        let capacity = f64::from(per_minute);
        (self.tokens + elapsed * capacity / 60.0).min(capacity)
    }
}

impl Default for RateLimiter {
    fn default() -> Self {
        Self::new()
    }
}

impl RateLimiter {
    pub fn new() -> RateLimiter {
        RateLimiter {
            state: Mutex::new(State {
                buckets: HashMap::new(),
                last_sweep: Instant::now(),
            }),
        }
    }

    /// Takes one call from `principal_id`'s bucket of `per_minute` calls a minute, or says how
    /// long until the next call would be allowed. `per_minute` 0 refuses every call.
    pub fn check(&self, principal_id: &str, per_minute: u32) -> Result<(), Duration> {
        self.check_at(principal_id, per_minute, Instant::now())
    }

    fn check_at(&self, principal_id: &str, per_minute: u32, now: Instant) -> Result<(), Duration> {
        if per_minute == 0 {
            return Err(SWEEP_EVERY);
        }
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if now.saturating_duration_since(state.last_sweep) >= SWEEP_EVERY {
            state
                .buckets
                .retain(|_, b| b.refilled(now, b.per_minute) < f64::from(b.per_minute));
            state.last_sweep = now;
        }
        let bucket = match state.buckets.get_mut(principal_id) {
            Some(bucket) => bucket,
            None => state
                .buckets
                .entry(principal_id.to_owned())
                .or_insert(Bucket {
                    tokens: f64::from(per_minute),
                    updated: now,
                    per_minute,
                }),
        };
        let tokens = bucket.refilled(now, per_minute);
        bucket.updated = now;
        bucket.per_minute = per_minute;
        if tokens >= 1.0 {
            bucket.tokens = tokens - 1.0;
            Ok(())
        } else {
            bucket.tokens = tokens;
            let wait = (1.0 - tokens) * 60.0 / f64::from(per_minute);
            // Rounded up to the millisecond, so a retry after `wait` finds the token back.
            Err(Duration::from_millis((wait * 1000.0).ceil() as u64))
        }
    }

    #[cfg(test)]
    fn buckets(&self) -> usize {
        self.state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .buckets
            .len()
    }
}

impl Gateway {
    /// Counts one tool call of `principal` against its calls-per-minute limit: its profile's
    /// `calls_per_minute`, else `[limits] calls_per_minute`. `Err` holds how long until a call
    /// would be allowed; without a limit every call is `Ok`.
    pub async fn check_rate(&self, principal: &Principal) -> Result<(), Duration> {
        let config = self.config();
        let policy = &config.policy;
        let per_minute = principal
            .profile(policy)
            .and_then(|profile| profile.calls_per_minute)
            .or(policy.limits.calls_per_minute);
        match per_minute {
            Some(0) => self.rate_limiter.check(&principal.id(), 0),
            Some(per_minute) => {
                let id = principal.id();
                if let Some(cluster) = &self.cluster {
                    match cluster.take_token(&id, per_minute).await {
                        Ok(taken) => return taken,
                        // Down is logged by the cluster once, when it goes down.
                        Err(cluster::ClusterError::Down) => {}
                        Err(error) => {
                            tracing::warn!(%error, "shared rate limit unavailable; counting in this replica");
                        }
                    }
                }
                self.rate_limiter.check(&id, per_minute)
            }
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_of_the_per_minute_figure_then_one_per_interval() {
        let limiter = RateLimiter::new();
        let start = Instant::now();
        for i in 0..3 {
            assert_eq!(limiter.check_at("client:ci", 3, start), Ok(()), "call {i}");
        }
        // 3 a minute: one token every 20 s.
        assert_eq!(
            limiter.check_at("client:ci", 3, start),
            Err(Duration::from_secs(20))
        );
        let later = start + Duration::from_secs(5);
        assert_eq!(
            limiter.check_at("client:ci", 3, later),
            Err(Duration::from_secs(15))
        );
        let refilled = start + Duration::from_secs(20);
        assert_eq!(limiter.check_at("client:ci", 3, refilled), Ok(()));
        assert!(limiter.check_at("client:ci", 3, refilled).is_err());
    }

    #[test]
    fn principals_have_their_own_buckets() {
        let limiter = RateLimiter::new();
        let now = Instant::now();
        assert_eq!(limiter.check_at("client:a", 1, now), Ok(()));
        assert!(limiter.check_at("client:a", 1, now).is_err());
        assert_eq!(limiter.check_at("client:b", 1, now), Ok(()));
        assert_eq!(limiter.check_at("local", 1, now), Ok(()));
    }

    #[test]
    fn a_bucket_never_holds_more_than_the_burst() {
        let limiter = RateLimiter::new();
        let start = Instant::now();
        assert_eq!(limiter.check_at("local", 2, start), Ok(()));
        let much_later = start + Duration::from_secs(3600);
        assert_eq!(limiter.check_at("local", 2, much_later), Ok(()));
        assert_eq!(limiter.check_at("local", 2, much_later), Ok(()));
        assert!(limiter.check_at("local", 2, much_later).is_err());
    }

    #[test]
    fn zero_refuses_and_a_lower_limit_applies_at_once() {
        let limiter = RateLimiter::new();
        let now = Instant::now();
        assert!(limiter.check_at("local", 0, now).is_err());
        assert_eq!(limiter.check_at("local", 100, now), Ok(()));
        // The figure dropped to 1: the bucket holds at most 1 token now, and that one is
        // taken.
        assert_eq!(limiter.check_at("local", 1, now), Ok(()));
        assert!(limiter.check_at("local", 1, now).is_err());
    }

    #[test]
    fn idle_buckets_are_swept() {
        let limiter = RateLimiter::new();
        let start = Instant::now();
        for i in 0..1000 {
            assert_eq!(limiter.check_at(&format!("user:{i}"), 60, start), Ok(()));
        }
        assert_eq!(limiter.buckets(), 1000);
        // Two minutes on every bucket is full again; the sweep leaves only the caller's.
        let later = start + Duration::from_secs(120);
        assert_eq!(limiter.check_at("user:new", 60, later), Ok(()));
        assert_eq!(limiter.buckets(), 1);
        // A bucket still refilling survives a sweep.
        let busy = later + Duration::from_secs(30);
        for _ in 0..59 {
            assert_eq!(limiter.check_at("busy", 60, busy), Ok(()));
        }
        let sweep = later + SWEEP_EVERY;
        assert_eq!(limiter.check_at("other", 60, sweep), Ok(()));
        assert_eq!(limiter.buckets(), 2, "the busy bucket and the caller's");
    }
}
