//! Configuration: `gateway.toml` and its policy files.
//!
//! [`file`] is the serde model of what users write; [`compile`] validates it into [`Config`],
//! returning every problem with its file, line and column.

mod action;
mod approval_header;
mod approval_page;
mod compile;
mod conversations;
mod duration;
mod edge;
mod env;
pub use env::unknown_variables;
mod error;
mod expressions;
mod file;
mod lookup;
mod named_file;
mod policy_file;
mod protocol;
mod receipts;
mod routes;
mod secret;
mod server;
mod session;
mod store;
mod tool_policy;
mod traces;
mod webhook;

pub use crate::identity::{SessionSettings, VerifySettings};

pub(crate) use crate::identity::SessionClaims;
pub use crate::telemetry::TracingSettings;
pub use approval_page::{ApprovalPage, ClientSecret};
pub use compile::{Config, admin_listen, load};
pub(crate) use conversations::{Conversations, ServiceToken};
pub(crate) use edge::{AccessLog, LogFormat, LogTarget, Passthrough, ProxyHeaders};
pub use error::ConfigError;
pub use error::ConfigErrors;
pub use policy_file::parse_policy_file;
pub use routes::Upstream;
pub use routes::{DEFAULT_ROUTE, RouteConfig};
pub use server::Server;
pub use store::StoreSettings;
pub use tool_policy::Mcp;
pub use webhook::{EventType, Webhook, WebhookSecret};
