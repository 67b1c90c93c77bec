//! The gateway's records as the admin API and the CLI show them: an audit row as JSON
//! ([`audit_json`]), times in UTC ([`utc`]), and the time words both accept ([`parse_time`]:
//! `30m` back from now, or an RFC 3339 time).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ids::{PrincipalId, QualifiedName, ServerName};
use serde::Serialize;
use serde_json::Value;
use store::time::unix_millis;

/// One audit row: what `mcpgw audit --json` prints and `GET /admin/v1/audit` answers.
pub fn audit_json(entry: &store::AuditEntry) -> Value {
    serde_json::to_value(AuditRow::from(entry)).unwrap_or_default()
}

/// One audit row as the admin API and `mcpgw audit --json` show it: never the arguments,
/// only their SHA-256.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct AuditRow {
    /// RFC 3339, UTC.
    pub time: String,
    /// The same time in milliseconds since the Unix epoch.
    pub at_ms: i64,
    pub principal: PrincipalId,
    pub server: ServerName,
    pub tool: QualifiedName,
    pub arguments_sha256: String,
    /// The audit log's word for what policy decided (`GET /admin/v1/audit?decision=`).
    pub decision: &'static str,
    /// Who approved or rejected the call, when a person did.
    pub approver: Option<String>,
    /// The audit log's word for how the call ended (`GET /admin/v1/audit?outcome=`).
    pub outcome: &'static str,
    pub latency_ms: u64,
    pub error: Option<String>,
}

impl From<&store::AuditEntry> for AuditRow {
    fn from(entry: &store::AuditEntry) -> AuditRow {
        AuditRow {
            time: utc(entry.at, true),
            at_ms: unix_millis(entry.at),
            principal: entry.principal.clone(),
            server: entry.server.clone(),
            tool: entry.tool.clone(),
            arguments_sha256: entry.arguments_sha256.clone(),
            decision: entry.decision.as_str(),
            approver: entry.decision.approver().map(str::to_owned),
            outcome: entry.outcome.as_str(),
            latency_ms: u64::try_from(entry.latency.as_millis()).unwrap_or(u64::MAX),
            error: entry.error.clone(),
        }
    }
}

/// `text` as a time: a duration back from `now` (`90s`, `30m`, `1h`, `2d`, `1w`), an RFC 3339
/// time (`T` or a space between date and time, fractional seconds, `Z` or an offset), or a
/// bare date meaning its midnight UTC. `None` for anything else.
pub fn parse_time(text: &str, now: SystemTime) -> Option<SystemTime> {
    let text = text.trim();
    if let Some(unit) = text.chars().last()
        && text.len() > 1
        && text[..text.len() - 1].bytes().all(|b| b.is_ascii_digit())
    {
        let n: u64 = text[..text.len() - 1].parse().ok()?;
        let seconds = match unit {
            's' => 1,
            'm' => 60,
            'h' => 3600,
            'd' => 86_400,
            'w' => 7 * 86_400,
            _ => return None,
        };
        let back = Duration::from_secs(n.checked_mul(seconds)?);
        return Some(now.checked_sub(back).unwrap_or(UNIX_EPOCH));
    }
    parse_rfc3339(text)
}

fn parse_rfc3339(text: &str) -> Option<SystemTime> {
    if let Ok(time) = chrono::DateTime::parse_from_rfc3339(text) {
        return Some(time.with_timezone(&chrono::Utc).into());
    }
    // chrono's RFC 3339 parser reads exactly `YYYY-MM-DD`: no shorter year or month.
    if text.len() != 10 {
        return None;
    }
    let date = chrono::NaiveDate::parse_from_str(text, "%Y-%m-%d").ok()?;
    Some(date.and_time(chrono::NaiveTime::MIN).and_utc().into())
}

/// `YYYY-MM-DD HH:MM:SS` in UTC, or `YYYY-MM-DDTHH:MM:SS.mmmZ` when `rfc3339`.
pub fn utc(time: SystemTime, rfc3339: bool) -> String {
    let time = chrono::DateTime::<chrono::Utc>::from(time);
    if rfc3339 {
        time.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
    } else {
        time.format("%Y-%m-%d %H:%M:%S").to_string()
    }
}
