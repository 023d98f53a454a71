//! The chaos runner: concurrent workers on wall-clock time, with faults
//! injected into workers, the network and the server.

pub mod draws;
pub mod fault;
pub mod lease_table;
pub mod matrix;
pub mod persistence_matrix;
pub(crate) mod proxy;
pub(crate) mod resp;
pub mod runner;
pub mod schedule;
