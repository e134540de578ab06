//! The Redis store (`redis://`): shared by any number of gateway replicas.
