//! Configuration: `gateway.toml` and its policy files.
//!
//! [`file`] is the serde model of what users write; [`compile`] validates it into [`Config`],
//! returning every problem with its file, line and column.

mod action;
mod compile;
mod duration;
mod env;
mod error;
mod file;
mod lookup;
mod policy_file;
mod tool_policy;

pub use crate::identity::{SessionClaims, VerifyMode};
pub use compile::{Config, Server, StoreSettings, Upstream, VERIFY_MISSING, load};
pub use duration::parse_duration;
pub use env::{Overrides, PREFIX as ENV_PREFIX};
pub use error::{ConfigError, ConfigErrors};
pub use policy_file::{load_policy_file, parse_policy_file};
pub use tool_policy::Mcp;
