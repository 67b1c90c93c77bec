//! The one poisoned-mutex helper of the crate.

/// Locks a std mutex, recovering the data if a panicking thread poisoned it: what the gateway
/// keeps under its mutexes (listeners, parked calls, pending logins, a call's audit record) is
/// consistent between statements.
pub(crate) fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
