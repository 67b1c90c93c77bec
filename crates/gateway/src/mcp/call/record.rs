//! The audit step: one record per catalog tool call, begun once the call is resolved to a
//! tool (an unknown name is no call to record) and written in one place, [`Record::finish`],
//! when the call ends. Steps in between only [`Record::note`] what happened.
//!
//! Two hand-offs: a call that asks its 2026-07-28 client to approve it is recorded when the
//! retry settles it (the asking attempt writes nothing), and a call parked while its client
//! answers the upstream takes its record with it (`relay` writes it when the parked call ends,
//! through [`Record::slot`]).

use std::sync::Mutex;

use rmcp::model::CallToolResponse;

use crate::{
    Gateway,
    audit::{AuditRecord, CallDecision},
    sync::lock,
};

/// The audit record of one call, while the call runs.
#[derive(Default)]
pub(crate) struct Record(Mutex<Option<AuditRecord>>);

impl Record {
    /// Starts the record (replacing one a re-attempt left).
    pub(crate) fn begin(&self, record: AuditRecord) {
        *lock(&self.0) = Some(record);
    }

    /// Updates the record, if the call still holds it.
    pub(crate) fn note(&self, update: impl FnOnce(AuditRecord) -> AuditRecord) {
        let mut slot = lock(&self.0);
        if let Some(record) = slot.take() {
            *slot = Some(update(record));
        }
    }

    /// Drops the record: what began turned out to be no call to record.
    pub(crate) fn discard(&self) {
        lock(&self.0).take();
    }

    /// The decision recorded so far, if the call still holds its record.
    pub(crate) fn decision(&self) -> Option<CallDecision> {
        lock(&self.0).as_ref().map(|record| record.decision.clone())
    }

    /// Where `relay` takes the record from when it parks the call.
    pub(crate) fn slot(&self) -> &Mutex<Option<AuditRecord>> {
        &self.0
    }

    /// Ends the call: the record, if the call still holds one and is not waiting for its
    /// client's approval, goes to the audit log.
    pub(crate) fn finish<E>(&self, gateway: &Gateway, response: &Result<CallToolResponse, E>) {
        if let Some(record) = self.take_finished(response) {
            gateway.audit(record);
        }
    }

    fn take_finished<E>(&self, response: &Result<CallToolResponse, E>) -> Option<AuditRecord> {
        let record = lock(&self.0).take()?;
        let asked = matches!(response, Ok(CallToolResponse::InputRequired(_)));
        (!asked).then_some(record)
    }

    #[cfg(test)]
    pub(crate) fn peek(&self) -> Option<AuditRecord> {
        lock(&self.0).clone()
    }
}

#[cfg(test)]
mod tests {
    use rmcp::model::{CallToolResult, InputRequiredResult};
    use store::{CallDecision, CallOutcome};

    use super::*;
    use crate::principal::Principal;

    fn record() -> AuditRecord {
        AuditRecord::begin(&Principal::Local, "time", "time__now", None)
    }

    #[test]
    fn notes_change_the_record_and_finish_hands_it_over_once() {
        let slot = Record::default();
        slot.note(|r| r.not_run("ignored: nothing begun"));
        assert!(slot.peek().is_none());
        slot.begin(record());
        slot.note(|r| r.decided(CallDecision::Denied).not_run("not allowed"));
        let done: Result<_, ()> = Ok(CallToolResponse::Complete(CallToolResult::success(vec![])));
        let finished = slot.take_finished(&done).expect("a record");
        assert_eq!(finished.decision, CallDecision::Denied);
        assert_eq!(finished.outcome, CallOutcome::NotRun);
        assert!(slot.take_finished(&done).is_none(), "written once");
    }

    #[test]
    fn a_call_waiting_for_its_clients_answer_is_not_written_yet() {
        let slot = Record::default();
        slot.begin(record());
        let asked: Result<_, ()> = Ok(CallToolResponse::InputRequired(InputRequiredResult::new(
            None, None,
        )));
        assert!(slot.take_finished(&asked).is_none());
    }

    #[test]
    fn a_parked_call_takes_its_record_along() {
        let slot = Record::default();
        slot.begin(record());
        let taken = lock(slot.slot()).take();
        assert!(taken.is_some());
        let done: Result<_, ()> = Ok(CallToolResponse::Complete(CallToolResult::success(vec![])));
        assert!(slot.take_finished(&done).is_none());
    }
}
