//! The driver: one request for an operation, on any interface (the HTTP API and the MCP
//! endpoint in `proxy`, the conversations service), from the front door to its decision.
//!
//! In order: `runner` (the front door's steps, in the spec's order, with the two that wait
//! between them: who may approve and the body) → `executor` (the driver of
//! `crate::operation::flow`: each need carried out against the store, the upstream
//! (`crate::upstream`) and the interface's answer reader (`reading`), and fed back) →
//! `page_offer` (an operation held for the Company's page becomes its link). What the
//! request came to is a [`Ran`], with its [`RequestOutcome`] (`outcome`), for the interface
//! to render in its own wire form and count once.
//!
//! Beside the executor, the calls with logic of their own: `lookup` (the lookups' upstream
//! calls and the computed terms), `record` (an answer recorded, retried in the background),
//! `end_log` (each end's log lines) and `unheld` (a request the condition does not hold).

mod end_log;
mod executor;
mod lookup;
mod outcome;
mod page_offer;
mod reading;
mod record;
mod runner;
mod unheld;

use std::sync::Arc;

pub(crate) use executor::{Executor, ExecutorParts, Operated};
pub(crate) use outcome::RequestOutcome;
pub(crate) use page_offer::PageLink;
pub(crate) use reading::{AnswerReader, Read, Reading};
// The conversations service's property tests take the front door alone.
#[cfg(test)]
pub(crate) use runner::{Admission, Door, admit_request};
pub(crate) use runner::{Arrival, Between, Ran, Straight, sender};

use crate::identity::SessionClaims;
use crate::metrics::Metrics;

/// What every interface runs its requests for operations with: one per route.
pub(crate) struct Runner {
    pub(crate) executor: Arc<Executor>,
    pub(crate) session_claims: SessionClaims,
    pub(crate) metrics: Arc<Metrics>,
}
