//! Who may call what, and when: the caller's profile (`access`), human approval of risky calls
//! (`approval`), calls-per-minute limits (`limits`), and tool-definition pinning (`pinning`).

pub mod access;
pub(crate) mod approval;
pub(crate) mod limits;
pub(crate) mod pinning;

pub use approval::{DecisionError, may_decide};
pub use pinning::{ApproveError, HeldTool, held_json};
