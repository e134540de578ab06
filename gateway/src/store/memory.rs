//! The embedded store (`memory://`): one process, nothing survives a restart.
