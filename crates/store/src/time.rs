//! Times as the database keeps them: signed milliseconds or seconds since the Unix epoch
//! (negative before it; saturating at the ends of `i64`), and durations as people read them.
//! The one place mcpgw converts `SystemTime` to and from Unix time or puts a duration in
//! words; the gateway and the cli use it too.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch, negative before it.
pub fn unix_millis(time: SystemTime) -> i64 {
    match time.duration_since(UNIX_EPOCH) {
        Ok(after) => i64::try_from(after.as_millis()).unwrap_or(i64::MAX),
        Err(before) => i64::try_from(before.duration().as_millis()).map_or(i64::MIN, |ms| -ms),
    }
}

/// The time `ms` milliseconds from the Unix epoch (the epoch itself if that is not a time this
/// platform can hold).
pub fn from_unix_millis(ms: i64) -> SystemTime {
    shifted(Duration::from_millis(ms.unsigned_abs()), ms >= 0)
}

/// Seconds since the Unix epoch, negative before it.
pub fn unix_seconds(time: SystemTime) -> i64 {
    match time.duration_since(UNIX_EPOCH) {
        Ok(after) => i64::try_from(after.as_secs()).unwrap_or(i64::MAX),
        Err(before) => i64::try_from(before.duration().as_secs()).map_or(i64::MIN, |s| -s),
    }
}

/// The time `seconds` from the Unix epoch (the epoch itself if that is not a time this
/// platform can hold).
pub fn from_unix_seconds(seconds: i64) -> SystemTime {
    shifted(Duration::from_secs(seconds.unsigned_abs()), seconds >= 0)
}

/// A duration in short words: `45 s`, `119 s`, `5 min`, `2 h 1 min`, `4 d` (whole units,
/// rounded down), as the cli's tables and the gateway's messages show it.
pub fn duration_words(duration: Duration) -> String {
    let s = duration.as_secs();
    match s {
        0..120 => format!("{s} s"),
        120..7200 => format!("{} min", s / 60),
        7200..172_800 => format!("{} h {} min", s / 3600, s % 3600 / 60),
        _ => format!("{} d", s / 86_400),
    }
}

fn shifted(offset: Duration, after: bool) -> SystemTime {
    let time = if after {
        UNIX_EPOCH.checked_add(offset)
    } else {
        UNIX_EPOCH.checked_sub(offset)
    };
    time.unwrap_or(UNIX_EPOCH)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversions_round_trip_on_both_sides_of_the_epoch() {
        for ms in [0, 1, 1_700_000_000_123, -1, -86_400_000] {
            assert_eq!(unix_millis(from_unix_millis(ms)), ms);
        }
        for s in [0, 1_900_000_000, -3600] {
            assert_eq!(unix_seconds(from_unix_seconds(s)), s);
        }
        let now = SystemTime::now();
        assert_eq!(unix_seconds(now), unix_millis(now) / 1000);
    }

    #[test]
    fn durations_read_as_words() {
        let check =
            |s: u64, expect: &str| assert_eq!(duration_words(Duration::from_secs(s)), expect);
        check(3, "3 s");
        check(119, "119 s");
        check(300, "5 min");
        check(3600, "60 min");
        check(7260, "2 h 1 min");
        check(400_000, "4 d");
    }
}
