//! How the token refreshes of this process ended, counted for the gateway's metrics
//! (`mcpgw_oauth_refreshes_total{outcome}`).
//!
//! Process-wide counters rather than a handle passed down to every [`super::AuthorizedClient`]:
//! the clients are built deep inside connection set-up, every refresh of the process is
//! counted alike, and the gateway reads the totals when it is scraped (as it reads the audit
//! log's). The outcomes are a fixed set, so the series stay bounded.

use std::sync::atomic::{AtomicU64, Ordering};

use super::RefreshFailure;

/// How one refresh ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RefreshOutcome {
    /// A new access token was stored.
    Ok,
    /// The refresh failed, but another process had stored newer tokens meanwhile: used.
    Replaced,
    /// The refresh failed for good ([`RefreshFailure`]), or for now (transient).
    Failed(RefreshFailure),
}

impl RefreshOutcome {
    /// Every outcome, in the order of [`refresh_counts`].
    pub const ALL: [RefreshOutcome; 5] = [
        RefreshOutcome::Ok,
        RefreshOutcome::Replaced,
        RefreshOutcome::Failed(RefreshFailure::Transient),
        RefreshOutcome::Failed(RefreshFailure::Reauthorize),
        RefreshOutcome::Failed(RefreshFailure::ClientRejected),
    ];

    /// The label value: `ok`, `replaced`, `transient`, `reauthorize`, `client_rejected`.
    pub fn as_str(self) -> &'static str {
        match self {
            RefreshOutcome::Ok => "ok",
            RefreshOutcome::Replaced => "replaced",
            RefreshOutcome::Failed(RefreshFailure::Transient) => "transient",
            RefreshOutcome::Failed(RefreshFailure::Reauthorize) => "reauthorize",
            RefreshOutcome::Failed(RefreshFailure::ClientRejected) => "client_rejected",
        }
    }

    fn index(self) -> usize {
        match self {
            RefreshOutcome::Ok => 0,
            RefreshOutcome::Replaced => 1,
            RefreshOutcome::Failed(RefreshFailure::Transient) => 2,
            RefreshOutcome::Failed(RefreshFailure::Reauthorize) => 3,
            RefreshOutcome::Failed(RefreshFailure::ClientRejected) => 4,
        }
    }
}

static COUNTS: [AtomicU64; 5] = [const { AtomicU64::new(0) }; 5];

/// Counts one refresh that ended as `outcome`.
pub(super) fn count(outcome: RefreshOutcome) {
    COUNTS[outcome.index()].fetch_add(1, Ordering::Relaxed);
}

/// Each outcome's label value and how many refreshes of this process ended so, since start.
pub fn refresh_counts() -> [(&'static str, u64); 5] {
    RefreshOutcome::ALL.map(|outcome| {
        (
            outcome.as_str(),
            COUNTS[outcome.index()].load(Ordering::Relaxed),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_outcome_has_its_own_count_and_label() {
        let before = refresh_counts();
        count(RefreshOutcome::Ok);
        count(RefreshOutcome::Failed(RefreshFailure::Reauthorize));
        let after = refresh_counts();
        let labels: Vec<&str> = after.iter().map(|(label, _)| *label).collect();
        assert_eq!(
            labels,
            [
                "ok",
                "replaced",
                "transient",
                "reauthorize",
                "client_rejected"
            ]
        );
        // Other tests of this binary may refresh meanwhile: at least one more of each.
        assert!(after[0].1 > before[0].1, "{before:?} {after:?}");
        assert!(after[3].1 > before[3].1, "{before:?} {after:?}");
    }
}
